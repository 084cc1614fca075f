"""Replica pool: the engine replicas a `PoolManager` routes over, with per-replica health and load.

Each replica is an `Engine` (an in-process `EmbeddedEngine`, a `ProcessReplica` in its own process,
later a vLLM server) plus the bookkeeping the balancer and scheduler need: a stable id, a health
flag, the number of requests in flight and its prefix-cache accounting (computed from the
`cached_prompt_tokens` every `TokenOutput` reports, so it works for any engine). Replicas can be
added and removed while calls are in flight; listeners (the balancer) hear about every change.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from legorl.serving.types import Engine, EngineClosedError
from legorl.serving.weight_sync import WeightSync

log = logging.getLogger(__name__)

# errors that mean "this replica is gone", not "this request is bad": the call is retried elsewhere
REPLICA_FAILURES: tuple[type[BaseException], ...] = (EngineClosedError, ConnectionError, EOFError, OSError)


class NoHealthyReplicaError(EngineClosedError):
    """Every replica in the pool is dead or removed."""


@dataclass
class Replica:
    """One engine plus the state routing needs. `order` is the stable tie-break (insertion order)."""

    id: str
    engine: Engine
    order: int
    healthy: bool = True
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    last_error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # set when the replica leaves routing: calls still waiting on it are abandoned and retried
    down: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def prefix_hit_rate(self) -> float:
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def record(self, prompt_tokens: int, cached_tokens: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.cached_prompt_tokens += cached_tokens


Event = Literal["added", "removed", "dead", "revived"]
Listener = Callable[[Event, Replica], None]


class ReplicaPool:
    """An ordered set of replicas. Not thread-safe: use it from the event loop that routes calls."""

    def __init__(self, engines: Sequence[Engine] = (), ids: Sequence[str] | None = None):
        self._replicas: dict[str, Replica] = {}
        self._order = itertools.count()
        self._listeners: list[Listener] = []
        for i, eng in enumerate(engines):
            self.add(eng, ids[i] if ids else None)

    # -- membership -------------------------------------------------------------------------------
    def add(self, engine: Engine, replica_id: str | None = None) -> Replica:
        """Add a replica; it takes new sessions at once. Give it the pool's weights first (see
        `PoolWeightSync`): a replica on another weight version is logged, not refused."""
        n = next(self._order)
        rid = replica_id or f"r{n}"
        if rid in self._replicas:
            raise ValueError(f"replica id {rid!r} already in the pool")
        versions = {r.engine.weight_version for r in self.healthy()}
        if versions and engine.weight_version not in versions:
            log.warning("replica %s joins at weight version %s, pool has %s", rid, engine.weight_version, versions)
        rep = Replica(rid, engine, n)
        self._replicas[rid] = rep
        self._emit("added", rep)
        return rep

    async def remove(self, replica_id: str, close: bool = True) -> Replica:
        """Take a replica out of routing (its sessions re-pin on their next call), then close it.
        In-flight calls on it fail over to the remaining replicas when the engine closes."""
        rep = self._replicas.pop(replica_id)
        rep.healthy = False
        self._emit("removed", rep)
        if close:  # its in-flight calls move elsewhere rather than wait for the close
            rep.down.set()
        if close:
            try:
                await rep.engine.close()
            except Exception:  # a dying engine must not stop the removal
                log.exception("closing replica %s failed", replica_id)
        return rep

    def mark_dead(self, replica_id: str, reason: str = "") -> None:
        rep = self._replicas.get(replica_id)
        if rep is None or not rep.healthy:
            return
        rep.healthy = False
        rep.failures += 1
        rep.last_error = reason
        rep.down.set()
        log.warning("replica %s marked dead: %s", replica_id, reason)
        self._emit("dead", rep)

    def mark_healthy(self, replica_id: str) -> None:
        rep = self._replicas[replica_id]
        if not rep.healthy:
            rep.healthy = True
            rep.down = asyncio.Event()
            self._emit("revived", rep)

    # -- lookups ----------------------------------------------------------------------------------
    def get(self, replica_id: str) -> Replica | None:
        return self._replicas.get(replica_id)

    def all(self) -> list[Replica]:
        return list(self._replicas.values())

    def healthy(self) -> list[Replica]:
        return [r for r in self._replicas.values() if r.healthy]

    def engines(self, healthy_only: bool = True) -> list[Engine]:
        return [r.engine for r in (self.healthy() if healthy_only else self.all())]

    def __len__(self) -> int:
        return len(self._replicas)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _emit(self, event: Event, rep: Replica) -> None:
        for fn in self._listeners:
            fn(event, rep)

    # -- lifecycle --------------------------------------------------------------------------------
    async def close(self) -> None:
        for rid in list(self._replicas):
            await self.remove(rid, close=True)

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"pool/replicas": float(len(self)), "pool/healthy": float(len(self.healthy()))}
        for r in self._replicas.values():
            p = f"pool/{r.id}"
            out[f"{p}/prefix_hit_rate"] = r.prefix_hit_rate
            out[f"{p}/requests"] = float(r.requests)
            out[f"{p}/in_flight"] = float(r.in_flight)
            out[f"{p}/healthy"] = float(r.healthy)
        return out


class PoolWeightSync(WeightSync):
    """`WeightSync` over whatever healthy replicas the pool holds at each push (replicas come and go)."""

    def __init__(self, pool: ReplicaPool):
        super().__init__(pool.engines())
        self.pool = pool

    async def push(
        self, state_dict: Mapping[str, Any], version: int | None = None, mode: Literal["wait", "abort"] = "wait"
    ) -> int:
        self.engines = self.pool.engines()
        return await super().push(state_dict, version, mode)
