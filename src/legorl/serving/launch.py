"""Start the inference replicas of any kind, one way for every command (`legorl train | serve | eval |
infer`): embedded engines (threads or child processes) or supervised vLLM servers (or attached URLs)."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from legorl.config.serving import RemoteSection, VLLMSection
from legorl.serving.types import Engine

EngineKind = Literal["embedded", "vllm"]
ENGINE_KINDS: tuple[str, ...] = ("embedded", "vllm")


@dataclass
class EngineSpec:
    """What replicas to start. `max_model_len` None: the model's window (vLLM: capped at 8192, since its
    KV cache must hold one full-length request)."""

    model_dir: Path
    kind: str = "embedded"
    n_replicas: int = 1
    kv_budget_tokens: int = 32768
    max_model_len: int | None = None
    max_num_seqs: int | None = None  # None: the engine's default
    seed: int = 0
    placement: Literal["thread", "process"] = "thread"
    threads_per_replica: int | None = None  # None: default_threads_per_replica()
    return_routed_experts: bool = False  # vLLM: send the routed experts back (R3)
    vllm: VLLMSection = field(default_factory=VLLMSection)
    work_dir: Path | None = None  # vLLM: one replica<i>/ each for logs and caches
    device: str = "cpu"  # embedded: `auto` (CUDA when present), `cpu`, `cuda[:N]`
    dtype: Literal["float32", "bfloat16"] = "float32"  # embedded: the model's and the KV cache's dtype
    remote: RemoteSection = field(default_factory=RemoteSection)  # remote: the shared server and the adapter name
    lora_rank: int = 0  # vLLM: > 0 starts the servers with --enable-lora for the run's adapter
    lora_name: str = "policy"  # vLLM: the adapters' names in the servers are `<lora_name>-v<version>`
    share_weights: bool = False  # embedded thread replicas serve one copy of the weights (create_pool)
    model: Any = None  # embedded thread replicas serve this model object of the process (the trainer's), not a load
    decode_attention: str = "auto"  # embedded: `auto`, `kernel` (the C decode kernel) or `torch` (serving.decode_attention)
    decode_linear: str = "auto"  # embedded: `auto`, `kernel` (few-row linears in C) or `torch` (serving.decode_linear)

    def __post_init__(self) -> None:
        if self.kind not in (*ENGINE_KINDS, "remote"):
            raise ValueError(f"unknown engine {self.kind!r}; use one of {', '.join(ENGINE_KINDS)}")


def default_threads_per_replica(n_replicas: int, cores: int | None = None) -> int:
    """Torch threads per embedded replica: the cores less one, shared out (at least 1). The spare core runs
    the event loop (proxy, scaffolds), sandboxes and verifiers; an OpenMP team spread over every core
    spins against them. Measured with the demo's step on 2 cores (bench/demo_step.py, 2026-12-01): rollout
    36.3 s with 2 engine threads, 27.9 s with 1."""
    cores = cores or os.cpu_count() or 1
    return max(1, (cores - 1) // n_replicas)


def _window(model_dir: Path) -> int:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return int(cfg.get("max_position_embeddings") or 0) or 1 << 30


async def start_engines(spec: EngineSpec) -> list[Engine]:
    """Start `spec.n_replicas` replicas; on a failure the ones already started are closed."""
    if spec.kind == "vllm":
        return await _start_vllm(spec)
    if spec.kind == "remote":
        from legorl.serving.remote.engine import RemoteEngine

        r = spec.remote
        return [await RemoteEngine.attach(r.url, r.adapter, r.timeout_sec)]
    import torch

    device = spec.device if spec.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    kwargs: dict = dict(kv_budget_tokens=spec.kv_budget_tokens, max_model_len=spec.max_model_len, seed=spec.seed,
                        device=device, dtype=getattr(torch, spec.dtype), decode_attention=spec.decode_attention,
                        decode_linear=spec.decode_linear)
    if spec.max_num_seqs:
        kwargs["max_num_seqs"] = spec.max_num_seqs
    if spec.n_replicas == 1 and spec.placement == "thread" and spec.model is None:
        from legorl.serving.embedded import EmbeddedEngine

        kwargs["num_threads"] = spec.threads_per_replica or default_threads_per_replica(1)
        engine = EmbeddedEngine.from_pretrained(spec.model_dir, **kwargs)
        await engine.start()
        return [engine]
    from legorl.serving.pool_manager import create_pool

    kwargs["num_threads"] = spec.threads_per_replica or default_threads_per_replica(spec.n_replicas)
    pool = await create_pool(spec.model_dir, spec.n_replicas, placement=spec.placement, engine_kwargs=kwargs,
                             share_weights=spec.share_weights, shared_model=spec.model)
    return pool.engines()


async def _start_vllm(spec: EngineSpec) -> list[Engine]:
    from legorl.serving.vllm import SafetensorsExporter, VLLMEngine, VLLMServerConfig
    from legorl.serving.vllm.lora import AdapterExporter, VLLMLora

    v = spec.vllm
    window = _window(spec.model_dir)
    max_len = min(spec.max_model_len or min(window, 8192), window)
    # shared by the replicas; each closes it, the last removes its files
    exporter = SafetensorsExporter(Path(v.weights_dir) if v.weights_dir else None).share(spec.n_replicas)
    seeds = [spec.seed + 7919 * i for i in range(spec.n_replicas)]
    # a LoRA run: each version's adapter is written once, next to the exporter's files (removed with them)
    adapters = AdapterExporter(exporter.root, str(spec.model_dir)) if spec.lora_rank else None

    def lora() -> VLLMLora | None:
        return VLLMLora(spec.lora_rank, adapters, spec.lora_name) if adapters else None

    transport = {"weight_transport": v.weight_transport, "weight_sync_timeout_s": v.weight_sync_timeout_s}
    if v.urls:
        if len(v.urls) != spec.n_replicas:
            raise ValueError(f"{len(v.urls)} vLLM URL(s) for {spec.n_replicas} replica(s): give one per replica")
        starts = [VLLMEngine.attach(u, model_dir=spec.model_dir, exporter=exporter, seed=seeds[i], name=f"vllm{i}",
                                    owns_exporter=True, lora=lora(), **transport)
                  for i, u in enumerate(v.urls)]
    else:
        starts = [VLLMEngine.launch(VLLMServerConfig(
            model_dir=spec.model_dir, dtype=v.dtype, max_model_len=max_len, max_num_seqs=spec.max_num_seqs or 64,
            seed=seeds[i], enforce_eager=v.enforce_eager, tensor_parallel_size=v.tensor_parallel_size,
            kv_cache_gib=v.kv_cache_gib, gpu_memory_utilization=v.gpu_memory_utilization,
            return_routed_experts=spec.return_routed_experts, lora_rank=spec.lora_rank, extra_args=list(v.extra_args),
            executable=v.executable, work_dir=spec.work_dir / f"replica{i}" if spec.work_dir else None,
            startup_timeout_s=v.startup_timeout_sec,
        ), exporter=exporter, name=f"vllm{i}", owns_exporter=True, lora=lora(), **transport) for i in range(spec.n_replicas)]
    results = await asyncio.gather(*starts, return_exceptions=True)
    engines = [e for e in results if not isinstance(e, BaseException)]
    errors = [e for e in results if isinstance(e, BaseException)]
    if errors:
        for e in engines:
            await e.close()
        exporter.close(force=True)
        raise errors[0]
    return list(engines)
