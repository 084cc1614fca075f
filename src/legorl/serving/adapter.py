"""The wire format of a LoRA adapter update, shared by the trainer that sends it and the engines that load it.

An adapter update is a state dict of tensors named `<module>.lora_A` (r x in), `<module>.lora_B` (out x r)
and `<module>.lora_scaling` (0-d: alpha / r), where `<module>` is the targeted Linear's path in the base
model (`model.layers.0.self_attn.q_proj`). It carries no base weight: a replica merges or applies it onto
the base it already holds, and the weight version of the push tags it like any other update.
"""

from __future__ import annotations

from collections.abc import Mapping
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
