"""In-process placement (the default): the policy server and the trial runner in this process.

Everything binds 127.0.0.1. `legorl train` starts one from the run config; `legorl eval` / `infer`
start one from a `PolicySpec` (a local model behind the proxy, a remote OpenAI-compatible server
whose tokens are not captured, or no model for the oracle / nop scaffolds).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.config.run import RunConfig
from legorl.config.serving import VLLMSection
from legorl.models.moe import is_moe
from legorl.models.store import DEFAULT_MODEL, resolve_model
from legorl.proxy import ProxyConfig
from legorl.rundir import RunDir
from legorl.runtime.stack import PolicyServer
from legorl.serving.launch import EngineSpec
from legorl.serving.types import Engine, EngineStats
from legorl.workers.config import WorkerConfig, worker_config
from legorl.workers.endpoints import DirectEndpoints, EndpointProvider, NoEndpoints, ProxyEndpoints
from legorl.workers.runner import WorkerRunner


def engine_spec(cfg: RunConfig, model_dir: Path, run_dir: RunDir | None = None) -> EngineSpec:
    """The replicas of a training run, from its `serving` and `rollout` sections."""
    serving, rollout = cfg.serving, cfg.rollout
    r3 = False
    if serving.engine == "vllm":  # vLLM sends routed experts back only when asked (R3)
        from transformers import AutoConfig

        r3 = bool(is_moe(AutoConfig.from_pretrained(model_dir)) if cfg.model.enable_r3 is None
                  else cfg.model.enable_r3)
    return EngineSpec(
        model_dir=model_dir, kind=serving.engine, n_replicas=serving.n_replicas,
        kv_budget_tokens=serving.kv_budget_tokens, max_model_len=rollout.max_prompt_len + rollout.max_response_len,
        max_num_seqs=max(rollout.concurrency, 1), seed=cfg.run.seed, placement=serving.placement,
        threads_per_replica=serving.threads_per_replica, return_routed_experts=r3, vllm=serving.vllm,
        work_dir=run_dir.vllm if run_dir is not None else None, device=serving.device, dtype=serving.dtype,
        remote=serving.remote.model_copy(update={"adapter": serving.remote.adapter or cfg.run.name}),
        lora_rank=cfg.model.lora.rank if serving.engine == "vllm" else 0, lora_name=cfg.run.name,
        share_weights=cfg.model.lora.rank == 0,  # a LoRA run merges its adapter into each replica's weights
        decode_attention=serving.decode_attention, decode_linear=serving.decode_linear,
    )


@dataclass
class PolicySpec:
    """The policy `legorl eval` / `infer` run against."""

    model: str | None = None  # store name or HF dir; with base_url: the served model's name
    base_url: str | None = None  # a remote OpenAI-compatible server (tokens are not captured)
    api_key: str = "legorl"
    kv_budget_tokens: int = 32768
    max_model_len: int | None = None
    tool_parser: str = "hermes"
    seed: int = 0
    engine: str = "embedded"  # or "vllm": a vLLM server legorl starts for the run
    device: str = "cpu"  # embedded: `auto`, `cpu`, `cuda[:N]` (a run config's serving.device)
    dtype: str = "float32"  # embedded: the model's and KV cache's dtype (a run config's serving.dtype)
    n_replicas: int = 1  # a run config's serving.n_replicas (embedded: threads of this process, one copy of the weights)
    threads_per_replica: int | None = None
    decode_attention: str = "auto"  # embedded: a run config's serving.decode_attention
    decode_linear: str = "auto"  # embedded: a run config's serving.decode_linear
    # vllm: a run config's serving.vllm (its `urls` attach servers instead of starting one)
    vllm: VLLMSection = field(default_factory=VLLMSection)


@dataclass
class InProcessRuntime:
    """The `Runtime` of this process: `server` is None when no local policy is served."""

    server: PolicyServer | None
    runner: WorkerRunner
    free_kv_during_update: bool = False  # serving.free_kv_during_update

    @classmethod
    async def start(cls, cfg: RunConfig, run_dir: RunDir, model: Any = None) -> InProcessRuntime:
        """A training run's runtime; `model`: a model object of this process the replicas serve (the trainer's,
        `RunConfig.engines_serve_trainer_model`) instead of loading their own copy."""
        model_dir = resolve_model(cfg.model.path)
        spec = engine_spec(cfg, model_dir, run_dir)
        spec.model = model
        server = await PolicyServer.start(spec,
                                          ProxyConfig.from_section(cfg.serving.proxy, tool_parser=cfg.agent.tool_parser),
                                          cfg.serving,
                                          partial_rollout=cfg.async_training.partial_enabled)
        return cls(server, WorkerRunner(worker_config(cfg, run_dir.root), ProxyEndpoints(server.proxy)),
                   cfg.serving.free_kv_during_update)

    @classmethod
    async def for_policy(cls, policy: PolicySpec, config: WorkerConfig, needs_model: bool = True) -> InProcessRuntime:
        """`legorl eval` / `infer`'s runtime: the worker `config` against the `policy`."""
        endpoints: EndpointProvider
        server = None
        if not needs_model:
            endpoints = NoEndpoints()
        elif policy.base_url:
            model = policy.model or await asyncio.to_thread(_first_model, policy.base_url, policy.api_key)
            endpoints = DirectEndpoints(policy.base_url, model, policy.api_key)
        else:
            model_dir = resolve_model(policy.model or DEFAULT_MODEL)
            spec = EngineSpec(model_dir, kind=policy.engine, kv_budget_tokens=policy.kv_budget_tokens,
                              max_model_len=policy.max_model_len, seed=policy.seed, device=policy.device,
                              dtype=policy.dtype, n_replicas=policy.n_replicas,  # type: ignore[arg-type]
                              threads_per_replica=policy.threads_per_replica, share_weights=True,
                              decode_attention=policy.decode_attention, decode_linear=policy.decode_linear,
                              vllm=policy.vllm)
            server = await PolicyServer.start(spec, ProxyConfig(tool_parser=policy.tool_parser))
            endpoints = ProxyEndpoints(server.proxy)
        return cls(server, WorkerRunner(config, endpoints))

    @property
    def engines(self) -> Sequence[Engine]:
        return self.server.engines if self.server is not None else []

    @property
    def captures_tokens(self) -> bool:
        return self.runner.endpoints.captures_tokens

    def syncing(self) -> AbstractAsyncContextManager[None]:
        return self.server.syncing() if self.server is not None else nullcontext()

    def updating(self) -> AbstractAsyncContextManager[None]:
        if self.server is None or not self.free_kv_during_update:
            return nullcontext()
        return self.server.kv_freed()

    async def partial_counters(self) -> dict[str, int]:
        return self.server.partial_counters() if self.server is not None else {}

    async def revive(self) -> int:
        return 0

    async def serving_metrics(self) -> dict[str, float]:
        return self.server.metrics() if self.server is not None else {}

    async def engine_stats(self) -> list[EngineStats]:
        return [e.stats() for e in self.engines]

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


@asynccontextmanager
async def policy_runtime(policy: PolicySpec, config: WorkerConfig,
                         needs_model: bool = True) -> AsyncIterator[InProcessRuntime]:
    """`async with policy_runtime(...) as runtime:` closes everything it started."""
    runtime = await InProcessRuntime.for_policy(policy, config, needs_model)
    try:
        yield runtime
    finally:
        await runtime.close()


def _first_model(base_url: str, api_key: str) -> str:
    """The first model a remote server lists (so `--base-url` alone is enough)."""
    base = base_url.rstrip("/")
    url = (base if base.endswith("/v1") else base + "/v1") + "/models"
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        data = json.loads(resp.read())
    return data["data"][0]["id"]
