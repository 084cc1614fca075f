"""Named models and where they live.

A model spec is either a registered name (`smollm2-135m-instruct`, `tiny-llama`, `tiny-qwen3-moe`)
or a path to a local HF model directory. Registered models are prepared once into
`$LEGORL_HOME/models/<name>` (default `~/.cache/legorl`) as safetensors fp32 + tokenizer, so every
later load is a plain `from_pretrained(dir)` that takes a fraction of a second. This module is the
registry; the mechanics (paths, atomic builds) live in `legorl.models.home`.
"""

from __future__ import annotations

import os
from pathlib import Path

from legorl.models.gguf import SMOLLM2
from legorl.models.home import (
    DEFAULT_MODEL,
    ModelEntry,
    ModelNotFoundError,
    is_model_dir,
    legorl_home,
    models_dir,
    prepare_entry,
    stored_path,
)
from legorl.models.tiny import build_tiny_llama, build_tiny_qwen3_moe

__all__ = ["DEFAULT_MODEL", "REGISTRY", "ModelEntry", "ModelNotFoundError", "legorl_home", "list_models",
           "models_dir", "prepare_model", "resolve_model"]


def _build_tiny_moe_wide(out: Path) -> None:
    build_tiny_qwen3_moe(out, num_experts=64, top_k=8, expert_std=0.3)


REGISTRY: dict[str, ModelEntry] = {
    e.name: e
    for e in [
        SMOLLM2,
        ModelEntry(
            "tiny-llama", "random-weight 2-layer Llama with SmolLM2's tokenizer (unit tests)", build_tiny_llama, "2"
        ),
        ModelEntry(
            "tiny-qwen3-moe", "random-weight 2-layer Qwen3-MoE, 4 experts top-2 (unit tests, R3)",
            build_tiny_qwen3_moe, "2"
        ),
        ModelEntry(
            "tiny-qwen3-moe-wide", "random-weight 2-layer Qwen3-MoE, 64 experts top-8 (R3 benchmark)",
            _build_tiny_moe_wide, "2",
        ),
    ]
}


def prepare_model(name: str, force: bool = False) -> Path:
    """Build a registered model into the store (idempotent; atomic via a temp dir + rename)."""
    if name not in REGISTRY:
        raise ModelNotFoundError(f"unknown model {name!r}; registered: {', '.join(REGISTRY)}")
    return prepare_entry(REGISTRY[name], force=force)


def resolve_model(spec: str | os.PathLike[str], prepare: bool = True) -> Path:
    """Turn a model spec into a local HF directory; prepares registered models on first use."""
    path = Path(spec).expanduser()
    if is_model_dir(path):
        return path.resolve()
    name = str(spec)
    if name in REGISTRY:
        stored = stored_path(REGISTRY[name])
        if stored is not None:
            return stored
        if prepare:
            return prepare_model(name)
        raise ModelNotFoundError(f"model {name!r} is not prepared; run `legorl models prepare {name}`")
    if path.exists():
        raise ModelNotFoundError(f"{path} has no config.json: not a Hugging Face model directory")
    raise ModelNotFoundError(
        f"unknown model {name!r}: not a local model directory nor a registered name ({', '.join(REGISTRY)})"
    )


def list_models() -> list[tuple[str, str, Path | None]]:
    """(name, description, prepared path or None) for each registered model."""
    return [(entry.name, entry.description, stored_path(entry)) for entry in REGISTRY.values()]
