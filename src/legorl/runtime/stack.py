"""The policy server, assembled in one place for every command: replicas -> manager -> proxy.

`legorl train` (in-process and inside the Ray actor), `legorl eval` / `infer` and `legorl serve` all
build the same stack from an `EngineSpec` and a `ProxyConfig`: one replica without the session
scheduler sits behind the single-replica manager; several (or the scheduler) behind the balanced
pool; with partial rollout a `PartialRolloutManager` wraps whichever it is, so generations a weight
sync cuts resume under the new weights. Callers see the proxy; the trainer's weight sync sees the
engines and brackets itself with `syncing()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.config.serving import ServingSection
from legorl.models.chat import load_tokenizer
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.launch import EngineSpec, start_engines
from legorl.serving.manager import ServerManager, SingleReplicaManager
from legorl.serving.partial import PartialRolloutManager
from legorl.serving.types import Engine


def build_manager(engines: list[Engine], serving: ServingSection | None = None,
                  pool: bool = False) -> ServerManager:
    """One replica without the scheduler: the plain manager; otherwise (or with `pool`) the balanced pool."""
    serving = serving or ServingSection()
    if len(engines) == 1 and not serving.scheduler.enabled and not pool:
        return SingleReplicaManager(engines[0], int(engines[0].max_model_len))  # type: ignore[attr-defined]
    from legorl.serving.balancer import LoadBalancer
    from legorl.serving.pool import ReplicaPool
    from legorl.serving.pool_manager import PoolManager

    pool = ReplicaPool(engines)
    return PoolManager(pool, LoadBalancer(pool, serving.balancer, serving.max_sticky_sessions, serving.affinity_slack),
                       scheduler=serving.scheduler.scheduler_config())


@dataclass
class PolicyServer:
    model_dir: Path
    engines: list[Engine]
    manager: ServerManager
    proxy: ProxyServer
    tokenizer: Any
    partial: PartialRolloutManager | None = None

    @classmethod
    async def start(cls, spec: EngineSpec, proxy_config: ProxyConfig, serving: ServingSection | None = None,
                    partial_rollout: bool = False, engine_api: bool = False) -> PolicyServer:
        return await cls.assemble(await start_engines(spec), spec.model_dir, proxy_config, serving, partial_rollout,
                                  engine_api=engine_api)

    @classmethod
    async def assemble(cls, engines: list[Engine], model_dir: Path, proxy_config: ProxyConfig,
                       serving: ServingSection | None = None, partial_rollout: bool = False,
                       pool: bool = False, engine_api: bool = False) -> PolicyServer:
        """The stack over replicas already started (in this process, or handles on remote ones); closes
        them if the stack cannot start. `pool`: the balanced pool even for one replica (health, revival).
        `engine_api`: also serve /engine/* (serving/remote/api.py), so training runs can share these replicas."""
        try:
            manager = build_manager(engines, serving, pool)
            partial = None
            if partial_rollout:
                partial = PartialRolloutManager(manager)
                manager = partial
            tokenizer = load_tokenizer(model_dir)
            proxy = ProxyServer(manager, tokenizer, proxy_config)
            if callable(getattr(engines[0], "adapters", None)):  # a request's `model` may name an adapter
                proxy.models.adapters = engines[0].adapters
            if engine_api:
                from legorl.serving.remote.api import EngineAPI

                vocab = int(getattr(engines[0], "vocab_size", 0) or len(tokenizer))
                proxy.extra_routes = EngineAPI(manager, engines, proxy_config.model_name, vocab).routes()
            await proxy.start()
        except BaseException:
            for e in engines:
                await e.close()
            raise
        return cls(model_dir, engines, manager, proxy, tokenizer, partial)

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        """Bracket a weight sync: with partial rollout, generations it aborts resume when it ends."""
        if self.partial is None:
            yield
            return
        async with self.partial.syncing():
            yield

    @contextlib.asynccontextmanager
    async def kv_freed(self) -> AsyncIterator[None]:
        """Bracket a synchronous update (`serving.free_kv_during_update`): every replica sleeps, its KV pool's
        memory given back, and resumes with a fresh pool after it."""
        for e in self.engines:
            if not callable(getattr(e, "sleep", None)):
                raise TypeError(f"{type(e).__name__} cannot free its KV cache: serving.free_kv_during_update "
                                "needs embedded replicas")
        slept: list[Engine] = []
        try:
            for e in self.engines:
                await e.sleep()  # type: ignore[attr-defined]
                slept.append(e)
            yield
        finally:
            for e in slept:
                await e.resume()

    def metrics(self) -> dict[str, float]:
        """The manager's counters (pool health, failovers, balancer, scheduler); {} for one plain replica."""
        manager = self.partial.inner if self.partial is not None else self.manager
        fn = getattr(manager, "metrics", None)
        return dict(fn()) if fn is not None else {}

    def partial_counters(self) -> dict[str, int]:
        p = self.partial
        return {"resumed": p.resumed, "partial": p.partial} if p is not None else {}

    async def close(self) -> None:
        await self.proxy.close()
        close = getattr(self.manager, "close", None)
        if close is not None:
            await close()
        for e in self.engines:
            await e.close()
