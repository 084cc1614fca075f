"""The driver's side of the collective weight transport (`cluster.weight_transport = "collective"`).

The driver only introduces the two ends: before each sync it forms a pair group between trainer rank 0 and every
healthy replica that lacks one (a new, revived or re-formed one) and tells the trainer which replicas this sync
sends to; after it, a replica that came back (Ray restarted it, or a transfer to it failed) gets a fresh pair and
a full sync of the current weights to it alone, then rejoins routing. Every wait is bounded by
`cluster.weight_sync_timeout_s`: a replica that does not join in time is marked dead, never waited on forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal

from legorl.serving.weight_sync import WeightSync

log = logging.getLogger(__name__)


class SubsetTarget:
    """A weight-sync target for some replicas only (a revival): the gateway's pause / update / resume on them."""

    accepts_weight_buckets = True

    def __init__(self, gateway: Any, rids: list[str], version: int):
        self.gateway, self.rids, self._version = gateway, list(rids), version

    @property
    def weight_version(self) -> int:
        return self._version

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None:
        await self.gateway.pause.remote(mode, self.rids)

    async def update_weights(self, state_dict: Mapping[str, Any], version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None:
        await self.gateway.update_weights.remote(state_dict, version, mode, self.rids)
        self._version = int(version)

    async def resume(self) -> None:
        await self.gateway.resume.remote(self.rids)


class CollectiveLink:
    """Pairs trainer rank 0 (`rank0`, a TrainerRankActor) with the gateway's replicas for one run."""

    def __init__(self, gateway: Any, trainer: Any, timeout_s: float, backend: str = "gloo"):
        self.gateway, self.trainer = gateway, trainer  # trainer: cluster.trainer.RayTrainer
        self.timeout_s, self.backend = timeout_s, backend
        self.revive_s = 0.0

    @property
    def rank0(self) -> Any:
        return self.trainer.actors[0]

    async def form(self, rid: str) -> bool:
        """A fresh pair between rank 0 and replica `rid` (both ends at once); False when it failed."""
        ip, port = await self.rank0.open_peer.remote(rid)
        joined, hosted = await asyncio.gather(
            self.gateway.join_transfer.remote(rid, ip, port, self.timeout_s, self.backend),
            self.rank0.finish_peer.remote(rid), return_exceptions=True)
        if joined is True and not isinstance(hosted, BaseException):
            return True
        log.warning("weight-transfer pair with %s not formed: %r / %r", rid, joined, hosted)
        return False

    async def prepare(self) -> tuple[str, ...]:
        """Before a sync: every healthy replica has a pair; the trainer sends this sync to those."""
        targets = await self.gateway.transfer_targets.remote()
        have = set(await self.rank0.transfer_peers.remote())
        formed = [rid for rid in targets if rid in have or await self.form(rid)]
        self.trainer.collective_peers = tuple(formed)
        return tuple(formed)

    async def revive(self, version: int, wait_s: float) -> int:
        """Replicas back from the dead get a fresh pair and a full sync to them alone, then rejoin routing."""
        t0 = time.perf_counter()
        ready = await self.gateway.stale_ready.remote(wait_s)
        formed = [rid for rid in ready if await self.form(rid)]
        if not formed:
            return 0
        self.trainer.collective_peers = tuple(formed)
        try:
            await WeightSync([SubsetTarget(self.gateway, formed, version)]).push_stream(
                self.trainer.stream_weights, version)
        except Exception as exc:  # one of them died again: it stays out, the next revival tries again
            log.warning("full sync to revived replicas %s failed: %r", formed, exc)
            return 0
        finally:
            self.trainer.collective_peers = None
        n = int(await self.gateway.rejoin.remote(formed))
        self.revive_s = time.perf_counter() - t0
        return n
