"""Start one engine of either kind for the commands that serve a single policy (`legorl serve`,
`legorl eval`, `legorl infer`). Training runs build their replicas from the run config instead
(`legorl.runtime.inprocess`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

from legorl.serving.types import Engine

EngineKind = Literal["embedded", "vllm"]
ENGINE_KINDS: tuple[str, ...] = ("embedded", "vllm")


async def start_engine(
    model_dir: Path, kind: str = "embedded", *, kv_budget_tokens: int = 65536, seed: int = 0,
    max_model_len: int | None = None, work_dir: Path | None = None, vllm_kv_cache_gib: int = 2,
) -> Engine:
    """An engine serving `model_dir`: the embedded engine in this process, or a supervised vLLM server
    (fp32, eager, prefix caching; `work_dir` keeps its log). `max_model_len` None: the model's window
    (capped at 8192 for vLLM, whose KV cache must hold one full-length request)."""
    if kind == "embedded":
        from legorl.serving.embedded import EmbeddedEngine

        engine = await asyncio.to_thread(EmbeddedEngine.from_pretrained, model_dir, kv_budget_tokens=kv_budget_tokens,
                                         seed=seed, max_model_len=max_model_len)
        await engine.start()
        return engine
    if kind == "vllm":
        from legorl.serving.vllm import VLLMEngine, VLLMServerConfig

        window = int(json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings") or 2048)
        return await VLLMEngine.launch(VLLMServerConfig(
            model_dir=Path(model_dir), max_model_len=min(max_model_len or min(window, 8192), window), seed=seed,
            kv_cache_gib=vllm_kv_cache_gib, work_dir=work_dir,
        ))
    raise ValueError(f"unknown engine {kind!r}; use one of {', '.join(ENGINE_KINDS)}")
