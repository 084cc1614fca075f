"""`RayRuntime`: the run's roles as Ray actors, seen by the training loop as one `Runtime`.

    driver (train loop)  --trials-->   sandbox hosts (AgentLoopWorkers: sandboxes, scaffolds, verifiers)
          |                               | HTTP (scaffold -> proxy)      | Ray (open/close session, record)
          |-- weight buckets (refs) -->  gateway (proxy, balancer, scheduler, replica health)
          |                               | Ray (generate, weight refs)
    trainer rank actors               engine replica actors (embedded or a supervised `vllm serve`)

The driver only coordinates: it places each role (cluster/placement.py), hands the trainer's weight
buckets to the gateway as object refs (the tensors go from rank 0's object store to each replica's
node), and asks the gateway to revive replicas Ray restarted before each step. Trainer ranks are
started by `train/loop.py:start_trainer` (cluster/trainer.py), not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from legorl.cluster.placement import RolePlacement, check_gateway_reachable, connect, import_ray
from legorl.config.run import RunConfig
from legorl.rundir import RunDir
from legorl.serving.types import EngineStats
from legorl.serving.weight_sync import RemoteBucket

REVIVE_WAIT_S = 120.0


class GatewayTarget:
    """The driver's weight-sync target: the gateway, which forwards each bucket to every healthy replica."""

    accepts_weight_buckets = True

    def __init__(self, gateway: Any, version: int):
        self.gateway = gateway
        self._version = version

    @property
    def weight_version(self) -> int:
        return self._version

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None:
        await self.gateway.pause.remote(mode)

    async def update_weights(self, state_dict: Mapping[str, Any] | RemoteBucket, version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None:
        bucket = state_dict if isinstance(state_dict, RemoteBucket) else {
            k: v.detach().cpu() for k, v in state_dict.items()}
        await self.gateway.update_weights.remote(bucket, version, mode)
        self._version = int(version)

    async def resume(self) -> None:
        await self.gateway.resume.remote()


@dataclass
class RayRuntime:
    engines: list[GatewayTarget]
    runner: Any  # cluster.hosts.HostsRunner
    gateway: Any
    replicas: list[Any]
    owns_cluster: bool
    placements: list[RolePlacement] = field(default_factory=list)
    proxy_url: str = ""
    link: Any = None  # cluster.transfer.CollectiveLink once a trainer is attached (collective transport)
    weight_transport: str = "object_store"
    weight_sync_timeout_s: float = 60.0

    @classmethod
    async def start(cls, cfg: RunConfig, run_dir: RunDir) -> RayRuntime:
        import_ray()
        owns = connect(cfg.cluster)
        placements: list[RolePlacement] = []
        replicas: list[Any] = []
        gateway = runner = None
        try:
            check_gateway_reachable(cfg.cluster)
            gateway, replicas, info = await _start_serving(cfg, run_dir, placements)
            from legorl.cluster.hosts import start_hosts

            runner, hosts_placement = await start_hosts(cfg, str(run_dir.root), gateway)
            placements.append(hosts_placement)
        except BaseException:
            await _teardown(runner, gateway, replicas, placements, owns)
            raise
        return cls([GatewayTarget(gateway, int(info["weight_version"]))], runner, gateway, replicas, owns,
                   placements, str(info["url"]), weight_transport=cfg.cluster.weight_transport,
                   weight_sync_timeout_s=cfg.cluster.weight_sync_timeout_s)

    def attach_trainer(self, trainer: Any) -> None:
        """The run's `RayTrainer`: with the collective transport its rank 0 sends the weights to the replicas."""
        if self.weight_transport == "collective":
            from legorl.cluster.transfer import CollectiveLink

            self.link = CollectiveLink(self.gateway, trainer, self.weight_sync_timeout_s)

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        if self.link is not None:
            await self.link.prepare()  # pairs for replicas that lack one, before any is paused
        await self.gateway.begin_sync.remote()
        try:
            yield
        finally:
            await self.gateway.end_sync.remote()
            if self.link is not None:
                self.link.trainer.collective_peers = None

    def updating(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to free: the replicas are Ray actors (serving.free_kv_during_update is refused with Ray)."""
        return contextlib.nullcontext()

    async def revive(self, timeout_s: float = REVIVE_WAIT_S) -> int:
        """Replicas Ray restarted rejoin with the current weights; waits up to `timeout_s` for restarting ones.
        Collective transport: a fresh pair and a full sync to them (`CollectiveLink.revive`)."""
        if self.link is not None:
            return await self.link.revive(self.engines[0].weight_version, timeout_s)
        return int(await self.gateway.revive.remote(timeout_s))

    async def health(self) -> dict[str, Any]:
        return await self.gateway.health.remote()

    async def serving_metrics(self) -> dict[str, float]:
        out = {**await self.gateway.metrics.remote(), **self.runner.metrics()}
        if self.link is not None:
            out["weight_sync/revive_s"] = self.link.revive_s  # the last full sync to revived replicas
        return out

    async def partial_counters(self) -> dict[str, int]:
        return await self.gateway.partial_counters.remote()

    async def engine_stats(self) -> list[EngineStats]:
        return await self.gateway.engine_stats.remote()

    async def close(self) -> None:
        await _teardown(self.runner, self.gateway, self.replicas, self.placements, self.owns_cluster)


async def _start_serving(cfg: RunConfig, run_dir: RunDir,
                         placements: list[RolePlacement]) -> tuple[Any, list[Any], dict[str, Any]]:
    """Replica actors (one engine each, spread by `cluster.engines`) and the gateway in front of them."""
    import ray

    from legorl.cluster.gateway import GatewayActor
    from legorl.cluster.replica import ReplicaActor
    from legorl.models.store import resolve_model
    from legorl.runtime.inprocess import engine_spec

    n = cfg.serving.n_replicas
    spec = dataclasses.replace(engine_spec(cfg, resolve_model(cfg.model.path), run_dir), n_replicas=1,
                               placement="thread")
    engines = RolePlacement.reserve("engines", cfg.cluster.engines, n)
    placements.append(engines)
    replica_cls = ray.remote(ReplicaActor)
    replicas = [replica_cls.options(**engines.options(i), max_restarts=cfg.cluster.max_restarts, max_task_retries=0)
                .remote(spec, i)
                for i in range(n)]
    gw_place = RolePlacement.reserve("gateway", cfg.cluster.gateway, 1)
    placements.append(gw_place)
    gateway = ray.remote(GatewayActor).options(**gw_place.options(0)).remote()
    info = await gateway.start.remote(cfg.model_dump_json(), str(run_dir.root), replicas)
    return gateway, replicas, info


async def _teardown(runner: Any, gateway: Any, replicas: list[Any], placements: list[RolePlacement],
                    owns_cluster: bool) -> None:
    """Close every role (hosts first: their trials end before the policy goes), then stop what we started."""
    import ray

    try:
        if runner is not None:
            await runner.close()
        if gateway is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(gateway.close.remote(), 60)
            ray.kill(gateway)
        for r in replicas:
            with contextlib.suppress(Exception):
                ray.kill(r, no_restart=True)
        for p in placements:
            p.release()
    finally:
        if owns_cluster:
            ray.shutdown()
