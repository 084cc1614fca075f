"""The wire format of a LoRA adapter update, shared by the trainer that sends it and the engines that load it.

An adapter update is a state dict of tensors named `<module>.lora_A` (r x in), `<module>.lora_B` (out x r)
and `<module>.lora_scaling` (0-d: alpha / r), where `<module>` is the targeted Linear's path in the base
model (`model.layers.0.self_attn.q_proj`). It carries no base weight: a replica merges or applies it onto
the base it already holds, and the weight version of the push tags it like any other update.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

SUFFIXES = (".lora_A", ".lora_B", ".lora_scaling")


def is_adapter_key(name: str) -> bool:
    return name.endswith(SUFFIXES)


def is_adapter_update(state_dict: Mapping[str, Any]) -> bool:
    """An update made of adapter tensors only (a mix with base weights is refused by `split_adapter`)."""
    return bool(state_dict) and any(is_adapter_key(k) for k in state_dict)


def split_adapter(state_dict: Mapping[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """{module: {"A", "B", "scaling"}} from an adapter update; raises on a partial or mixed update."""
    others = [k for k in state_dict if not is_adapter_key(k)]
    if others:
        raise ValueError(f"update_weights: an adapter update also carries base weights {others[:3]}: "
                         "send the adapter alone")
    mods: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in state_dict.items():
        module, part = k.rsplit(".", 1)
        mods.setdefault(module, {})[part.removeprefix("lora_")] = v
    for module, parts in mods.items():
        missing = {"A", "B", "scaling"} - set(parts)
        if missing:
            raise ValueError(f"update_weights: adapter for {module} lacks {sorted(missing)}")
    return mods


def write_peft_adapter(state: Mapping[str, torch.Tensor], out: str | Path, base_model: str = "") -> Path:
    """Write an adapter in the wire format above as a PEFT LoRA directory (`adapter_config.json` +
    `adapter_model.safetensors`): tensors renamed `base_model.model.<module>.lora_A.weight`, `lora_alpha` recovered
    from the scaling (alpha / r), `target_modules` a regex of the exact module paths so PEFT (and vLLM) wrap those
    layers and nothing else. One rank and one scaling for every module (ValueError otherwise). `legorl export`
    and the vLLM engine's weight sync both write adapters with this."""
    import json

    from safetensors.torch import save_file

    mods = split_adapter(state)
    ranks = {int(p["A"].shape[0]) for p in mods.values()}
    scalings = {round(float(p["scaling"]), 6) for p in mods.values()}
    if len(ranks) != 1 or len(scalings) != 1:
        raise ValueError(f"the adapter mixes ranks {sorted(ranks)} / scalings {sorted(scalings)}")
    (rank,), (scaling,) = ranks, scalings
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module, p in mods.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = p["A"].detach().to("cpu").contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = p["B"].detach().to("cpu").contiguous()
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base_model),
        "r": rank, "lora_alpha": scaling * rank, "lora_dropout": 0.0, "bias": "none",
        "target_modules": "(?:" + "|".join(re.escape(m) for m in sorted(mods)) + ")",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "use_rslora": False,
        "use_dora": False, "modules_to_save": None,
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return out


def read_peft_adapter(directory: str | Path) -> dict[str, torch.Tensor]:
    """A PEFT LoRA adapter directory (`adapter_config.json` + `adapter_model.safetensors`, as `legorl export`
    writes it) in the wire format above; ValueError naming what is wrong (rsLoRA, DoRA, per-module ranks and
    extra trained modules are not LoRA as the engine applies it)."""
    import json

    from safetensors.torch import load_file

    d = Path(directory)
    cfg_path, weights = d / "adapter_config.json", d / "adapter_model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise ValueError(f"{d} is not a PEFT adapter directory (adapter_config.json and "
                         "adapter_model.safetensors; `legorl export RUN OUT --model BASE` writes one)")
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{d}: peft_type {cfg.get('peft_type')!r}; only LORA adapters are served")
    for key in ("use_rslora", "use_dora", "rank_pattern", "alpha_pattern", "modules_to_save"):
        if cfg.get(key):
            raise ValueError(f"{d}: adapter_config.json sets {key}, which the engine does not apply")
    scaling = torch.tensor(float(cfg["lora_alpha"]) / int(cfg["r"]), dtype=torch.float32)
    out: dict[str, torch.Tensor] = {}
    for k, v in load_file(str(weights)).items():
        m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.(lora_[AB])(?:\.[^.]+)?\.weight", k)
        if m is None:
            raise ValueError(f"{d}: unexpected tensor {k!r} in adapter_model.safetensors")
        out[f"{m[1]}.{m[2]}"] = v.float()
        out[f"{m[1]}.lora_scaling"] = scaling
    if not out:
        raise ValueError(f"{d}: adapter_model.safetensors holds no LoRA tensors")
    split_adapter(out)  # every module has its A and B
    return out
