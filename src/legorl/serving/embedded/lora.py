"""LoRA adapters on the embedded engine: several named adapters over one base, and the merged fast path.

Adapters travel in the format of serving/adapter.py. The engine holds any number of them by name (None:
the default adapter a training run pushes through `update_weights`, which requests without a name use).
Each packed step is served one of two ways:

- **merged**: when exactly one adapter is loaded and every row of the step uses it, its update is written
  into the weights (W = W_base + s * B @ A, from a kept copy of each targeted base weight, so syncs never
  accumulate rounding) and a step costs what the base model costs (docs/lora.md: 1.27-1.43x faster decode
  than applying it in the forward);
- **in the forward**: otherwise the weights are the base and a hook on each targeted Linear adds
  s * B(A(x)) to the rows of each adapter (grouped: one pair of thin matmuls per adapter present in the
  step; rows on the base skip it), the same expression the trainer's hook computes.

Every load is checked whole before anything changes: an unknown module, a non-Linear target, a missing
piece or a shape mismatch raises, so a replica that cannot load an adapter fails the sync instead of
serving the base and looking stale.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from legorl.serving.adapter import split_adapter

_serial = itertools.count(1)


@dataclass(eq=False)
class Adapter:
    name: str | None
    version: int
    mods: dict[str, tuple[torch.Tensor, torch.Tensor, float]]  # module -> (A, B, scaling)
    key: bytes  # unique per load: part of the prefix-cache root of its rows (never shared across adapters)


class AdapterSet:
    """The adapters of one engine model (used on the engine thread only)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.modules = dict(model.named_modules())
        self.adapters: dict[str | None, Adapter] = {}
        self.base: dict[str, torch.Tensor] = {}  # targeted base weights, kept for merging and unmerging
        self.merged: Adapter | None = None  # the adapter written into the weights (None: they are the base)
        self._groups: list[tuple[Adapter, int, int]] = []  # this forward's (adapter, first token, end token)
        self._hooks: dict[str, Any] = {}
        self._tokens = 0  # tokens of this forward: a module seeing another count (a routed expert) cannot be split
        self.counters = {"merged_steps": 0, "forward_steps": 0, "merges": 0, "unmerges": 0}

    # -- loading ------------------------------------------------------------------------------------
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
    def load(self, name: str | None, state_dict: Mapping[str, Any], version: int) -> int:
        """Add or replace adapter `name` (checked whole first); returns the modules it targets."""
        mods = split_adapter(state_dict)
        self._check(mods)
        dev = next(self.model.parameters()).device
        parts = {m: (p["A"].to(dev, torch.float32).contiguous(), p["B"].to(dev, torch.float32).contiguous(),
                     float(p["scaling"])) for m, p in mods.items()}
        for m in parts:
            if m not in self._hooks:
                self._hooks[m] = self.modules[m].register_forward_hook(self._hook(m))
        old = self.adapters.get(name)
        if old is not None and old.version == int(version):  # a later bucket of the same push
            parts = {**old.mods, **parts}
        new = Adapter(name, int(version), parts,
                      hashlib.blake2b(f"{name!r}/{version}/{next(_serial)}".encode(), digest_size=8).digest())
        self.adapters[name] = new
        if old is not None and self.merged is old:  # the training case: re-merge at every sync
            self._merge(new)
        return len(parts)

    def unmerge(self) -> None:
        """Write the base weights back (before a full-weight update copies over some of them)."""
        self._merge(None)

    def forget(self) -> None:
        """A full-weight update replaced the base (call `unmerge` first): the default adapter is gone and
        the kept base copies are stale."""
        self.adapters.pop(None, None)
        self.base.clear()

    def names(self) -> dict[str, int]:
        """Named adapters and their versions."""
        return {n: a.version for n, a in self.adapters.items() if n is not None}

    def resolve(self, name: str | None) -> Adapter | None:
        """The adapter rows named `name` run with: None is the default adapter when one is loaded, else the
        base. KeyError for an unknown name."""
        return self.adapters.get(name) if name is None else self.adapters[name]

    # -- merging ------------------------------------------------------------------------------------
    @torch.no_grad()
    def _merge(self, adapter: Adapter | None) -> None:
        if self.merged is not None:
            for m in self.merged.mods:
                if adapter is None or m not in adapter.mods:
                    self.modules[m].weight.data.copy_(self.base[m])
            self.counters["unmerges"] += adapter is None
        if adapter is not None:
            for m, (a, b, s) in adapter.mods.items():
                w = self.modules[m].weight
                if m not in self.base:  # unmerged above unless never merged: w is the base
                    self.base[m] = w.detach().clone()
                if w.dtype == torch.float32:  # in place, no temporaries
                    torch.addmm(self.base[m], b, a, alpha=s, out=w.data)
                else:
                    w.copy_(torch.addmm(self.base[m].float(), b, a, alpha=s).to(w.dtype))
            self.counters["merges"] += 1
        self.merged = adapter

    # -- forwards -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def rows(self, per_row: Sequence[Adapter | None], lengths: Sequence[int] | None = None) -> Iterator[None]:
        """Serve one forward whose packed rows (of `lengths` tokens; None: one each) use `per_row`'s adapters."""
        present = set(per_row)
        if not self.adapters or (present == {None} and self.merged is None):
            yield
            return
        (only,) = present if len(present) == 1 else (None,)
        if only is not None and len(self.adapters) == 1:
            if self.merged is not only:
                self._merge(only)
            self.counters["merged_steps"] += 1
            yield
            return
        if self.merged is not None:
            self._merge(None)
        lengths = lengths if lengths is not None else [1] * len(per_row)
        groups: list[tuple[Adapter, int, int]] = []  # runs of consecutive rows on one adapter (callers sort)
        t = 0
        for ad, n in zip(per_row, lengths, strict=True):
            if ad is not None and groups and groups[-1][0] is ad and groups[-1][2] == t:
                groups[-1] = (ad, groups[-1][1], t + n)
            elif ad is not None:
                groups.append((ad, t, t + n))
            t += n
        self._groups = [(ad, 0, -1) if s == 0 and e == t else (ad, s, e) for ad, s, e in groups]
        self._tokens = t
        self.counters["forward_steps"] += 1
        try:
            yield
        finally:
            self._groups = []

    def _hook(self, name: str):
        def hook(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor | None:
            if not self._groups:
                return None
            x = inputs[0]
            if x.shape[-2] != self._tokens and any(end >= 0 for _, _, end in self._groups):
                raise RuntimeError(f"{name} sees {x.shape[-2]} of the step's {self._tokens} tokens (a routed expert?): "
                                   "its adapter cannot be applied per row")
            for ad, start, end in self._groups:
                p = ad.mods.get(name)
                if p is None:
                    continue
                a, b, s = p
                if end < 0:  # every row: the trainer hook's expression exactly
                    out = out + (F.linear(F.linear(x.to(a.dtype), a), b) * s).to(out.dtype)
                else:  # a run of rows: views, added in place
                    xs = x[..., start:end, :].to(a.dtype)
                    out[..., start:end, :] += (F.linear(F.linear(xs, a), b) * s).to(out.dtype)
            return out

        return hook
