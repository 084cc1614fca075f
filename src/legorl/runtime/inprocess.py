"""In-process placement (the default): engine replicas, server manager and proxy in this process.

Everything binds 127.0.0.1. One replica runs behind the single-replica manager; several replicas
(threads or child processes) run behind the pool manager with the sticky load balancer and, when
enabled, the session scheduler. Callers only see the `ServerManager` and the proxy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.models.chat import load_tokenizer
from legorl.models.store import resolve_model
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.manager import ServerManager, SingleReplicaManager
from legorl.serving.types import Engine


@dataclass
class InProcessRuntime:
    model_dir: Path
    engines: list[Engine]
    manager: ServerManager
    proxy: ProxyServer
    tokenizer: Any

    @classmethod
    async def start(cls, cfg: RunConfig) -> InProcessRuntime:
        r, s = cfg.rollout, cfg.serving
        if r.engine != "embedded":
            raise NotImplementedError(f"rollout.engine={r.engine!r} is not available yet; use 'embedded'")
        model_dir = resolve_model(cfg.model.path)
        engine_kwargs: dict[str, Any] = dict(
            kv_budget_tokens=r.kv_budget_tokens, max_model_len=r.max_prompt_len + r.max_response_len,
            seed=cfg.run.seed, max_num_seqs=max(r.concurrency, 1),
        )
        manager: Any
        if r.n_replicas == 1 and not s.scheduler:
            engine = EmbeddedEngine.from_pretrained(model_dir, **engine_kwargs)
            await engine.start()
            manager, engines = SingleReplicaManager(engine, engine.max_model_len), [engine]
        else:
            from legorl.serving.balancer import LoadBalancer
            from legorl.serving.pool_manager import PoolManager, create_pool

            engine_kwargs["num_threads"] = s.threads_per_replica or max(1, (os.cpu_count() or 1) // r.n_replicas)
            pool = await create_pool(model_dir, r.n_replicas, placement=s.placement, engine_kwargs=engine_kwargs)
            manager = PoolManager(pool, LoadBalancer(pool, s.balancer, s.max_sticky_sessions),
                                  scheduler=s.scheduler_config())
            engines = pool.engines()
        tokenizer = load_tokenizer(model_dir)
        proxy = ProxyServer(manager, tokenizer, ProxyConfig(tool_parser=r.tool_parser))
        await proxy.start()
        return cls(model_dir, engines, manager, proxy, tokenizer)

    async def close(self) -> None:
        await self.proxy.close()
        close = getattr(self.manager, "close", None)
        if close is not None:
            await close()
        for e in self.engines:
            await e.close()
