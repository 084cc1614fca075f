"""LoRA adapters on the embedded engine: an adapter update is merged into the base weights it targets.

The adapter travels in the format of serving/adapter.py. The engine keeps a copy of each targeted base
weight the first time an adapter touches it and writes W = W_base + scaling * B @ A from that copy on every update, so syncs never accumulate rounding and a
decode step costs what the base model costs (docs/lora.md has the merged vs in-forward measurement).

Every update is checked whole before any weight changes: an unknown module, a non-Linear target, a
missing piece or a shape mismatch raises, so a replica that cannot load the adapter fails the sync
instead of serving the base and looking stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from legorl.serving.adapter import split_adapter


class MergedAdapter:
    """The adapter state of one engine model: base copies of the targeted weights and the merge."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.base: dict[str, torch.Tensor] = {}
        self.modules = dict(model.named_modules())

    def _check(self, mods: dict[str, dict[str, torch.Tensor]]) -> None:
        for name, parts in mods.items():
            m = self.modules.get(name)
            if not isinstance(m, torch.nn.Linear):
                raise ValueError(f"update_weights: adapter targets {name!r}, which is not a Linear of this model")
            a, b = parts["A"], parts["B"]
            out_f, in_f = m.weight.shape
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != in_f or b.shape[0] != out_f or a.shape[0] != b.shape[1]:
                raise ValueError(f"update_weights: adapter for {name} has A {tuple(a.shape)}, B {tuple(b.shape)}; "
                                 f"the layer is {in_f} -> {out_f}")

    @torch.no_grad()
    def apply(self, state_dict: Mapping[str, Any]) -> int:
        """Merge an adapter update into the model in place; returns the modules updated."""
        mods = split_adapter(state_dict)
        self._check(mods)
        for name, parts in mods.items():
            w = self.modules[name].weight
            if name not in self.base:
                self.base[name] = w.detach().clone()
            a = parts["A"].to(w.device, torch.float32)
            b = parts["B"].to(w.device, torch.float32)
            scale = float(parts["scaling"])
            if w.dtype == torch.float32:  # in place, no temporaries: W = W_base + s * B @ A
                torch.addmm(self.base[name], b, a, alpha=scale, out=w.data)
            else:
                w.copy_(torch.addmm(self.base[name].float(), b, a, alpha=scale).to(w.dtype))
        return len(mods)

    def forget(self) -> None:
        """A full-weight update replaced the base: later adapters merge onto the new weights."""
        self.base.clear()
