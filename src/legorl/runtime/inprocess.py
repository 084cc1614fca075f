"""In-process placement (the default): engine replicas, server manager and proxy in this process.

Everything binds 127.0.0.1. Replicas are embedded engines (threads or child processes) or vLLM
servers (`rollout.engine = "vllm"`, started and stopped here, or attached by URL). One replica runs
behind the single-replica manager; several replicas run behind the pool manager with the sticky load balancer and, when
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
        model_dir = resolve_model(cfg.model.path)
        engine_kwargs: dict[str, Any] = dict(
            kv_budget_tokens=r.kv_budget_tokens, max_model_len=r.max_prompt_len + r.max_response_len,
            seed=cfg.run.seed, max_num_seqs=max(r.concurrency, 1),
        )
        engines: list[Engine]
        if r.engine == "vllm":
            engines = await start_vllm_replicas(cfg, model_dir)
        elif r.n_replicas == 1:
            engine = EmbeddedEngine.from_pretrained(model_dir, **engine_kwargs)
            await engine.start()
            engines = [engine]
        else:
            from legorl.serving.pool_manager import create_pool

            engine_kwargs["num_threads"] = s.threads_per_replica or max(1, (os.cpu_count() or 1) // r.n_replicas)
            pool = await create_pool(model_dir, r.n_replicas, placement=s.placement, engine_kwargs=engine_kwargs)
            engines = pool.engines()
        manager = _manager(cfg, engines)
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


def _manager(cfg: RunConfig, engines: list[Engine]) -> ServerManager:
    """One replica without the scheduler: the plain manager; otherwise the balanced pool."""
    s = cfg.serving
    if len(engines) == 1 and not s.scheduler:
        return SingleReplicaManager(engines[0], int(engines[0].max_model_len))  # type: ignore[attr-defined]
    from legorl.serving.balancer import LoadBalancer
    from legorl.serving.pool import ReplicaPool
    from legorl.serving.pool_manager import PoolManager

    pool = ReplicaPool(engines)
    return PoolManager(pool, LoadBalancer(pool, s.balancer, s.max_sticky_sessions), scheduler=s.scheduler_config())


async def start_vllm_replicas(cfg: RunConfig, model_dir: Path) -> list[Engine]:
    """Start (or attach to) `rollout.n_replicas` vLLM servers; they share one weight exporter."""
    import asyncio

    from transformers import AutoConfig

    from legorl.models.moe import is_moe
    from legorl.serving.vllm import SafetensorsExporter, VLLMEngine, VLLMServerConfig

    r, s = cfg.rollout, cfg.serving
    model_cfg = AutoConfig.from_pretrained(model_dir)
    r3 = is_moe(model_cfg) if cfg.model.enable_r3 is None else cfg.model.enable_r3  # routing comes back for R3
    window = int(getattr(model_cfg, "max_position_embeddings", 0) or 0) or 1 << 30
    max_len = min(r.max_prompt_len + r.max_response_len, window)
    exporter = SafetensorsExporter(Path(s.vllm_weights_dir) if s.vllm_weights_dir else None)
    work = Path(cfg.run.output_dir) / cfg.run.name / "vllm"
    if s.vllm_urls:
        tasks = [VLLMEngine.attach(u, model_dir=model_dir, exporter=exporter, seed=cfg.run.seed + 7919 * i,
                                   name=f"vllm{i}") for i, u in enumerate(s.vllm_urls)]
    else:
        tasks = [VLLMEngine.launch(VLLMServerConfig(
            model_dir=model_dir, dtype=s.vllm_dtype, max_model_len=max_len, max_num_seqs=max(r.concurrency, 1),
            seed=cfg.run.seed + 7919 * i, enforce_eager=s.vllm_enforce_eager,
            tensor_parallel_size=s.vllm_tensor_parallel_size, kv_cache_gib=s.vllm_kv_cache_gib,
            gpu_memory_utilization=s.vllm_gpu_memory_utilization, return_routed_experts=bool(r3),
            extra_args=list(s.vllm_extra_args), executable=s.vllm_executable, work_dir=work / f"replica{i}",
            startup_timeout_s=s.vllm_startup_timeout_sec,
        ), exporter=exporter, name=f"vllm{i}") for i in range(r.n_replicas)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    engines = [e for e in results if not isinstance(e, BaseException)]
    errors = [e for e in results if isinstance(e, BaseException)]
    if errors:
        for e in engines:
            await e.close()
        exporter.close()
        raise errors[0]
    return list(engines)
