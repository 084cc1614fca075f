"""Adapters for the multi-adapter tests: a trainer-side model with a random adapter, and its PEFT directory."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from legorl.config import load_config
from legorl.train.lora import ADAPTER_FILE, adapter_state, attach_lora
from legorl.train.lora_export import export_peft_adapter

from .reference import hf_model, teacher_forced


def lora_model(path, seed: int):
    """A trainer-side model with a random adapter (B large enough that two adapters differ clearly)."""
    model = hf_model(path)
    attach_lora(model, load_config(None, ["model.lora.rank=4", "model.lora.alpha=8"]).model.lora, seed=seed)
    gen = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".lora_B"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model, adapter_state(model)


def peft_dir(state: dict[str, torch.Tensor], base_dir, out: Path) -> Path:
    """The adapter as `legorl export` writes it (from a checkpoint directory holding it)."""
    ckpt = out.with_name(out.name + "-ckpt")
    ckpt.mkdir(parents=True)
    save_file(state, str(ckpt / ADAPTER_FILE))
    return export_peft_adapter(ckpt, Path(base_dir), out)


def mean_delta(model, ids: list[int], out) -> float:
    ref = teacher_forced(model, ids + out.token_ids)[len(ids) - 1:]
    return sum(abs(a - b) for a, b in zip(out.logprobs, ref, strict=True)) / len(ref)


def mean_delta_record(model, branch: dict) -> float:
    """Mean |logprob - trainer forward| over a recorded branch's policy tokens."""
    ids = branch["token_ids"]
    ref = teacher_forced(model, ids)
    pairs = [(lp, ref[i - 1]) for i, (m, lp) in enumerate(zip(branch["mask"], branch["logprobs"], strict=True))
             if m and i > 0]
    return sum(abs(a - b) for a, b in pairs) / len(pairs)
