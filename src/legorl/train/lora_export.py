"""`legorl export` for a LoRA checkpoint: a PEFT adapter directory, or (`--merge`) a merged HF model.

The checkpoint's `adapter.safetensors` holds `<module>.lora_A` / `.lora_B` / `.lora_scaling` per targeted
Linear. PEFT names the same tensors `base_model.model.<module>.lora_A.weight` and takes the scale as
lora_alpha / r, so the export renames, and recovers alpha from the stored scaling; target_modules is a
regex of the exact module paths, so PEFT wraps the same layers and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from legorl.serving.adapter import write_peft_adapter
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
    try:
        write_peft_adapter(load_file(str(checkpoint / ADAPTER_FILE)), out, str(base_model_dir))
    except ValueError as e:
        raise ValueError(f"{checkpoint}: {e}") from e
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
