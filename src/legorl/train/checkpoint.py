"""Checkpoints that let a killed run continue exactly: the trainer's own state (weights, optimizer,
schedule: `Checkpointable.save`), the step, the driver's RNG and the data position. Each is written to
a temp dir and renamed into place, so a kill mid-save leaves the previous checkpoint intact; `latest`
names the newest complete one.

Weights are Hugging Face safetensors, one `model.safetensors` or shards with an index (what a sharded
trainer streams out), so `legorl export` and `transformers` read either."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from legorl.rundir import RunDir

INDEX = "model.safetensors.index.json"


@dataclass
class TrainerState:
    step: int
    data_state: dict[str, Any]
    weight_version: int


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])


def untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): store independent contiguous copies."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        ptr = v.data_ptr()
        out[k] = v.detach().clone().contiguous() if ptr in seen else v.detach().contiguous()
        seen.add(ptr)
    return out


class ShardWriter:
    """Writes weight buckets as HF safetensors shards plus the index that maps names to files."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.files: list[tuple[str, list[str]]] = []
        self.total_size = 0

    def __call__(self, bucket: dict[str, torch.Tensor]) -> None:
        name = f"model-{len(self.files) + 1:05d}.safetensors"
        save_file(untie(bucket), str(self.directory / name))
        self.files.append((name, list(bucket)))
        self.total_size += sum(v.numel() * v.element_size() for v in bucket.values())

    def close(self) -> None:
        n = len(self.files)
        weight_map = {}
        for i, (old, keys) in enumerate(self.files):  # HF's naming: model-0000i-of-0000n
            new = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            (self.directory / old).rename(self.directory / new)
            weight_map.update(dict.fromkeys(keys, new))
        (self.directory / INDEX).write_text(json.dumps(
            {"metadata": {"total_size": self.total_size}, "weight_map": weight_map}, indent=1))


def read_weights(directory: Path) -> Iterator[dict[str, torch.Tensor]]:
    """The weights saved in `directory`, one file at a time (single file or shards)."""
    index = directory / INDEX
    if index.is_file():
        for name in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            yield load_file(str(directory / name))
    else:
        yield load_file(str(directory / "model.safetensors"))


class Checkpointable(Protocol):
    """What a checkpoint holds of the trainer: it writes and reads its own files in a directory."""

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


def save_checkpoint(root: Path, state: TrainerState, trainer: Checkpointable, keep: int | None = None) -> Path:
    """Write `step_<n>/` atomically and point `latest` at it; with `keep`, then delete all but the newest
    `keep` step directories (never the one just written)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state.step}"
    tmp = root / f".step_{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    trainer.save(tmp)
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(
        {"step": state.step, "data_state": state.data_state, "weight_version": state.weight_version}
    ))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(final.name)
    latest_tmp.replace(root / "latest")
    if keep is not None:
        _prune(root, keep, final)
    return final


def _prune(root: Path, keep: int, newest: Path) -> None:
    steps = sorted((int(p.name[5:]), p) for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit())
    for _, path in steps[:-keep]:
        if path != newest:
            shutil.rmtree(path, ignore_errors=True)


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / "trainer_state.json").is_file() else None


def load_checkpoint(path: Path, trainer: Checkpointable) -> TrainerState:
    trainer.load(path)
    if (path / "rng.pt").is_file():
        rng = torch.load(path / "rng.pt", weights_only=False)
    else:  # checkpoints written before rng.pt kept it inside optim.pt
        rng = torch.load(path / "optim.pt", weights_only=False)["rng"]
    _set_rng_state(rng)
    meta = json.loads((path / "trainer_state.json").read_text())
    return TrainerState(meta["step"], meta["data_state"], meta["weight_version"])


def trained_from(checkpoint: Path) -> str | None:
    """The model a run's checkpoint was trained from: the run's warm-started model when it made one (a LoRA
    adapter was trained on top of it), else the run config's `model.path`; None outside a run directory."""
    if checkpoint.parent.name != "checkpoints":
        return None
    root = checkpoint.parent.parent
    run = RunDir.of(root.parent, root.name)
    warm = run.warm_start
    if (warm / "done.json").is_file() and (warm / "model" / "config.json").is_file():
        return str(warm / "model")
    try:
        return str(json.loads(run.config_json.read_text())["model"]["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def export_hf(checkpoint: Path, base_model_dir: Path, out: Path) -> Path:
    """A checkpoint as a plain HF model dir (config + tokenizer from the base model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    for part in read_weights(checkpoint):
        model.load_state_dict(part, strict=False)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out)
    return out
