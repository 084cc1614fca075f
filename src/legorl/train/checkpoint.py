"""Checkpoints that let a killed run continue exactly: model, optimizer, scheduler, step, RNG and
data position. Each is written to a temp dir and renamed into place, so a kill mid-save leaves the
previous checkpoint intact; `latest` names the newest complete one."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file


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


def _untie(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): store independent contiguous copies."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        ptr = v.data_ptr()
        out[k] = v.detach().clone().contiguous() if ptr in seen else v.detach().contiguous()
        seen.add(ptr)
    return out


class Checkpointable(Protocol):
    """What a checkpoint holds of the trainer: its weights and the rest of its state (optimizer...)."""

    def weights(self) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state(self, weights: dict[str, torch.Tensor], state: dict[str, Any]) -> None: ...


def save_checkpoint(root: Path, state: TrainerState, trainer: Checkpointable) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{state.step}"
    tmp = root / f".step_{state.step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(_untie(trainer.weights()), str(tmp / "model.safetensors"))
    torch.save({**trainer.state_dict(), "rng": _rng_state()}, tmp / "optim.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(
        {"step": state.step, "data_state": state.data_state, "weight_version": state.weight_version}
    ))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(final.name)
    latest_tmp.replace(root / "latest")
    return final


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / "trainer_state.json").is_file() else None


def load_checkpoint(path: Path, trainer: Checkpointable) -> TrainerState:
    blob = torch.load(path / "optim.pt", weights_only=False)
    trainer.load_state(load_file(str(path / "model.safetensors")), blob)
    _set_rng_state(blob["rng"])
    meta = json.loads((path / "trainer_state.json").read_text())
    return TrainerState(meta["step"], meta["data_state"], meta["weight_version"])


def export_hf(checkpoint: Path, base_model_dir: Path, out: Path) -> Path:
    """A checkpoint as a plain HF model dir (config + tokenizer from the base model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    model.load_state_dict(load_file(str(checkpoint / "model.safetensors")), strict=False)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out)
    return out
