"""Ray placement (`cluster.runtime = "ray"`): the rollout side runs in a Ray actor, the trainer here.

One `RolloutActor` process holds an `InProcessRuntime` (engine replicas, manager, proxy and the
worker's trial runner); trials, their sandboxes and scaffolds run on the actor's node. The driver
sees a `RayRuntime`, the same `Runtime` protocol as in-process: `RayEngine` handles for the weight
sync, `RayRunner` for trials, and `syncing()` bracketing the sync inside the actor (partial rollout).

Ray is optional (`pip install 'legorl[ray]'`). A local cluster is started when `cluster.ray_address`
is unset and shut down at close; a cluster given by address is never stopped. With Ray >= 2.59 token
auth, connecting by address needs `RAY_AUTH_MODE=token` in the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from legorl.config.sections import RunConfig
from legorl.rundir import RunDir
from legorl.serving.types import EngineStats
from legorl.trial import TrialResult, TrialSpec
from legorl.workers.runner import OnDone


class RolloutActor:
    """An in-process runtime inside one Ray actor (decorated with `ray.remote` at start)."""

    def __init__(self) -> None:
        self.runtime: Any = None
        self._sync_cm: Any = None

    async def start(self, cfg_json: str, run_root: str) -> int:
        from legorl.runtime.inprocess import InProcessRuntime

        cfg = RunConfig.model_validate_json(cfg_json)
        self.runtime = await InProcessRuntime.start(cfg, RunDir(Path(run_root), cfg.run.name))
        return int(self.runtime.engines[0].weight_version)

    async def run_trial(self, spec: TrialSpec, temperature: float) -> TrialResult:
        return (await self.runtime.runner.run([spec], temperature))[0]

    async def begin_sync(self) -> None:
        self._sync_cm = self.runtime.syncing()
        await self._sync_cm.__aenter__()

    async def end_sync(self) -> None:
        cm, self._sync_cm = self._sync_cm, None
        if cm is not None:
            await cm.__aexit__(None, None, None)

    async def pause(self, mode: str) -> None:
        await asyncio.gather(*(e.pause(mode) for e in self.runtime.engines))

    async def update_weights(self, state_dict: Mapping[str, Any], version: int, mode: str) -> None:
        await asyncio.gather(*(e.update_weights(state_dict, version, mode) for e in self.runtime.engines))

    async def resume(self) -> None:
        await asyncio.gather(*(e.resume() for e in self.runtime.engines))

    async def partial_counters(self) -> dict[str, int]:
        return await self.runtime.partial_counters()

    async def engine_stats(self) -> list[Any]:
        return await self.runtime.engine_stats()

    async def close(self) -> None:
        if self.runtime is not None:
            await self.runtime.close()


class RayEngine:
    """Driver-side handle on the actor's replicas: what `WeightSync` needs of an engine."""

    accepts_weight_buckets = True  # the actor hands each bucket to its embedded engines

    def __init__(self, actor: Any, version: int):
        self.actor = actor
        self._version = version

    @property
    def weight_version(self) -> int:
        return self._version

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None:
        await self.actor.pause.remote(mode)

    async def update_weights(self, state_dict: Mapping[str, Any], version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None:
        state = {k: v.detach().cpu() for k, v in state_dict.items()}
        await self.actor.update_weights.remote(state, version, mode)
        self._version = int(version)

    async def resume(self) -> None:
        await self.actor.resume.remote()


class RayRunner:
    """The trial runner: one remote call per trial, so results stream back as trials end."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def run(self, specs: Sequence[TrialSpec], temperature: float,
                  on_done: OnDone | None = None) -> list[TrialResult]:
        import ray

        async def one(spec: TrialSpec) -> TrialResult:
            ref = self.actor.run_trial.remote(spec, temperature)
            try:
                res = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)
                raise
            if on_done is not None:
                ret = on_done(res)
                if asyncio.iscoroutine(ret):
                    await ret
            return res

        return list(await asyncio.gather(*(one(s) for s in specs)))


@dataclass
class RayRuntime:
    engines: list[RayEngine]
    runner: RayRunner
    actor: Any
    owns_cluster: bool

    @classmethod
    async def start(cls, cfg: RunConfig, run_dir: RunDir) -> RayRuntime:
        try:
            import ray
        except ImportError:
            raise RuntimeError("cluster.runtime='ray' needs Ray: pip install 'legorl[ray]'") from None
        owns = False
        if not ray.is_initialized():
            if cfg.cluster.ray_address:
                ray.init(address=cfg.cluster.ray_address)
            else:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                owns = True
        actor = ray.remote(num_cpus=0)(RolloutActor).remote()
        version = await actor.start.remote(cfg.model_dump_json(), str(run_dir.root))
        return cls([RayEngine(actor, int(version))], RayRunner(actor), actor, owns)

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        await self.actor.begin_sync.remote()
        try:
            yield
        finally:
            await self.actor.end_sync.remote()

    async def partial_counters(self) -> dict[str, int]:
        return await self.actor.partial_counters.remote()

    async def engine_stats(self) -> list[EngineStats]:
        return await self.actor.engine_stats.remote()

    async def close(self) -> None:
        import ray

        try:
            await asyncio.wait_for(self.actor.close.remote(), 60)
        finally:
            ray.kill(self.actor)
            if self.owns_cluster:
                ray.shutdown()
