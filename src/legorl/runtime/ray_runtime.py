"""Ray placement (`rollout.runtime = "ray"`): the rollout side runs in a Ray actor, the trainer here.

One `RolloutActor` process holds the same classes the in-process runtime uses: the embedded engine
replica, the server manager (wrapped for partial rollout in async mode), the proxy and the
agent-loop worker; trials, their sandboxes and scaffolds run on the actor's node. The driver keeps
the trainer and talks to the actor through two small clients with the in-process interfaces:
`RayEngine` (what `WeightSync` needs from an engine) and `RayRunner` (what the loops need from a
trial runner), so `SyncLoop`, `AsyncLoop` and `StepTrainer` run unchanged.

Ray is optional (`pip install 'legorl[ray]'`). A local cluster is started when `ray_address` is
unset and shut down at close; a cluster given by address is never stopped. With Ray >= 2.59 token
auth, connecting by address needs `RAY_AUTH_MODE=token` in the environment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from legorl.config import RunConfig
from legorl.workers.types import TrialResult, TrialSpec


class RolloutActor:
    """Engine + manager + proxy + worker in one process (decorated with `ray.remote` at start)."""

    def __init__(self) -> None:
        self.runtime: Any = None
        self.partial: Any = None
        self._sync_cm: Any = None

    async def start(self, cfg_json: str, run_root: str) -> dict[str, Any]:
        from legorl.runtime.inprocess import InProcessRuntime
        from legorl.train.async_run import install_partial
        from legorl.train.loop import RunPaths
        from legorl.train.run import WorkerRunner

        cfg = RunConfig.model_validate_json(cfg_json)
        self.runtime = await InProcessRuntime.start(cfg)
        if cfg.rollout.partial_enabled:
            self.partial = install_partial(self.runtime)
        self.runner = WorkerRunner(cfg, self.runtime, RunPaths(Path(run_root)))
        return {"model_dir": str(self.runtime.model_dir), "weight_version": self.runtime.engines[0].weight_version}

    async def run_trial(self, spec: TrialSpec, temperature: float, tag: str) -> TrialResult:
        return (await self.runner.run([spec], temperature, tag, lambda _r: None))[0]

    async def pause(self, mode: str) -> None:
        if self.partial is not None and self._sync_cm is None:  # aborts from here on are the sync's
            self._sync_cm = self.partial.syncing()
            await self._sync_cm.__aenter__()
        await asyncio.gather(*(e.pause(mode) for e in self.runtime.engines))

    async def update_weights(self, state_dict: Mapping[str, Any], version: int, mode: str) -> None:
        await asyncio.gather(*(e.update_weights(state_dict, version, mode) for e in self.runtime.engines))

    async def resume(self) -> None:
        try:
            await asyncio.gather(*(e.resume() for e in self.runtime.engines))
        finally:
            if self._sync_cm is not None:
                cm, self._sync_cm = self._sync_cm, None
                await cm.__aexit__(None, None, None)

    def weight_version(self) -> int:
        return int(self.runtime.engines[0].weight_version)

    def partial_counters(self) -> dict[str, int]:
        p = self.partial
        return {"resumed": p.resumed, "partial": p.partial} if p is not None else {}

    async def close(self) -> None:
        if self.runtime is not None:
            await self.runtime.close()


class RayEngine:
    """Driver-side handle on the actor's engine: the part of `Engine` that `WeightSync` uses."""

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
    """The loops' trial runner: one remote call per trial, so results stream back as trials end."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def run(self, specs: list[TrialSpec], temperature: float, tag: str,
                  on_done: Callable[[TrialResult], Any]) -> list[TrialResult]:
        import ray

        async def one(spec: TrialSpec) -> TrialResult:
            ref = self.actor.run_trial.remote(spec, temperature, tag)
            try:
                res = await ref
            except asyncio.CancelledError:
                ray.cancel(ref)
                raise
            ret = on_done(res)
            if asyncio.iscoroutine(ret):
                await ret
            return res

        return list(await asyncio.gather(*(one(s) for s in specs)))


@dataclass
class RayRuntime:
    model_dir: Path
    engines: list[RayEngine]
    runner: RayRunner
    tokenizer: Any
    actor: Any
    owns_cluster: bool

    @classmethod
    async def start(cls, cfg: RunConfig, run_root: Path) -> RayRuntime:
        try:
            import ray
        except ImportError:
            raise RuntimeError("rollout.runtime='ray' needs Ray: pip install 'legorl[ray]'") from None
        from legorl.models.chat import load_tokenizer

        owns = False
        if not ray.is_initialized():
            if cfg.rollout.ray_address:
                ray.init(address=cfg.rollout.ray_address)
            else:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                owns = True
        actor = ray.remote(num_cpus=0)(RolloutActor).remote()
        info = await actor.start.remote(cfg.model_dump_json(), str(run_root))
        engine = RayEngine(actor, int(info["weight_version"]))
        model_dir = Path(info["model_dir"])
        return cls(model_dir, [engine], RayRunner(actor), load_tokenizer(model_dir), actor, owns)

    async def close(self) -> None:
        import ray

        try:
            await asyncio.wait_for(self.actor.close.remote(), 60)
        finally:
            ray.kill(self.actor)
            if self.owns_cluster:
                ray.shutdown()
