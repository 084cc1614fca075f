"""`legorl export` for a LoRA checkpoint: a PEFT adapter directory, or (`--merge`) a merged HF model.

The checkpoint's `adapter.safetensors` holds `<module>.lora_A` / `.lora_B` / `.lora_scaling` per targeted
Linear. PEFT names the same tensors `base_model.model.<module>.lora_A.weight` and takes the scale as
lora_alpha / r, so the export renames, and recovers alpha from the stored scaling; target_modules is a
regex of the exact module paths, so PEFT wraps the same layers and nothing else.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from legorl.train.lora import ADAPTER_FILE


def is_lora_checkpoint(checkpoint: Path) -> bool:
    return (checkpoint / ADAPTER_FILE).is_file()


def _modules(state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    mods: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in state.items():
        module, part = k.rsplit(".", 1)
        mods.setdefault(module, {})[part] = v
    return mods


def export_peft_adapter(checkpoint: Path, base_model_dir: Path, out: Path) -> Path:
    """adapter_config.json + adapter_model.safetensors, loadable by `peft.PeftModel.from_pretrained`."""
    mods = _modules(load_file(str(checkpoint / ADAPTER_FILE)))
    ranks = {int(p["lora_A"].shape[0]) for p in mods.values()}
    scalings = {round(float(p["lora_scaling"]), 6) for p in mods.values()}
    if len(ranks) != 1 or len(scalings) != 1:
        raise ValueError(f"{checkpoint}: the adapter mixes ranks {sorted(ranks)} / scalings {sorted(scalings)}")
    (rank,), (scaling,) = ranks, scalings
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module, p in mods.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = p["lora_A"].contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = p["lora_B"].contiguous()
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base_model_dir),
        "r": rank, "lora_alpha": scaling * rank, "lora_dropout": 0.0, "bias": "none",
        "target_modules": "(?:" + "|".join(re.escape(m) for m in sorted(mods)) + ")",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "use_rslora": False,
        "use_dora": False, "modules_to_save": None,
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1))
    _tokenizer(base_model_dir, out)
    return out


@torch.no_grad()
def export_merged(checkpoint: Path, base_model_dir: Path, out: Path) -> Path:
    """The base with W + scaling * B @ A written into every targeted Linear: a plain HF model directory."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32)
    named = dict(model.named_modules())
    for module, p in _modules(load_file(str(checkpoint / ADAPTER_FILE))).items():
        layer = named.get(module)
        if not isinstance(layer, torch.nn.Linear):
            raise ValueError(f"{checkpoint}: adapter module {module!r} is not a Linear of {base_model_dir}")
        layer.weight.add_((p["lora_B"] @ p["lora_A"]) * float(p["lora_scaling"]))
    model.save_pretrained(out, safe_serialization=True)
    _tokenizer(base_model_dir, out)
    return out


def _tokenizer(base_model_dir: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base_model_dir).save_pretrained(out)
