"""Memory savers for the trainer: activation checkpointing that works in the actor's eval-mode forward,
and micro-batches packed by a token budget instead of a fixed row count.

Hugging Face's `gradient_checkpointing_enable()` only recomputes while `model.training` is True, but the
actor runs its gradient forward in eval mode (no dropout, so it matches the sampler's numerics): with
HF's switch the checkpointing silently never happened. Here each decoder layer is wrapped in
non-reentrant `torch.utils.checkpoint` whenever grad is enabled, whatever the module's mode; the
wrapped call goes through the layer's hooks, so FSDP2's and R3's hooks run in the recompute too.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of a causal LM (`model.model.layers` in the HF families)."""
    inner = getattr(model, "model", model)
    return list(getattr(inner, "layers", []))


def enable_activation_checkpointing(model: torch.nn.Module) -> int:
    """Recompute every decoder layer's activations in the backward pass; returns the layers wrapped."""
    layers = decoder_layers(model)
    for layer in layers:
        if getattr(layer, "_legorl_checkpointed", False):
            continue
        inner = layer.forward

        @functools.wraps(inner)
        def forward(*args, _inner=inner, **kwargs):
            if torch.is_grad_enabled():
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)
            return _inner(*args, **kwargs)

        layer.forward = forward
        layer._legorl_checkpointed = True
    return len(layers)


def fixed_micro_batches(rows: Sequence[int], size: int) -> list[list[int]]:
    """`size` rows per micro-batch, in order."""
    rows = list(rows)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def token_budget_micro_batches(lengths: Sequence[int], rows: Sequence[int], budget: int) -> list[list[int]]:
    """Rows packed longest first so that rows x longest row <= `budget` tokens per micro-batch (a row
    longer than the budget goes alone). Similar lengths share a micro-batch, so little is padding."""
    order = sorted(rows, key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = lengths[cur[0]] if cur else lengths[i]
        if cur and longest * (len(cur) + 1) > budget:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def padding_ratio(lengths: Sequence[int], micro_batches: Sequence[Sequence[int]]) -> float:
    """Share of the computed [rows x longest] positions that are padding."""
    real = sum(lengths[i] for mb in micro_batches for i in mb)
    computed = sum(len(mb) * max(lengths[i] for i in mb) for mb in micro_batches if mb)
    return 1.0 - real / computed if computed else 0.0


def balance_rows(lengths: Sequence[int], world: int) -> list[list[int]]:
    """Rows split over `world` ranks with balanced token counts (longest first to the lightest rank),
    each rank's rows in ascending order. Deterministic, so every rank computes every rank's share."""
    shares: list[list[int]] = [[] for _ in range(world)]
    load = [0] * world
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        shares[r].append(i)
        load[r] += lengths[i]
    return [sorted(s) for s in shares]
