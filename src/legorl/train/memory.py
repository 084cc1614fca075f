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
    """Recompute every decoder layer's activations in the backward pass; returns the layers wrapped.
    `set_activation_checkpointing(model, False)` suspends it (for a forward whose activations are small)."""
    layers = decoder_layers(model)
    for layer in layers:
        if getattr(layer, "_legorl_checkpointed", False):
            continue
        inner = layer.forward

        @functools.wraps(inner)
        def forward(*args, _inner=inner, _layer=layer, **kwargs):
            if torch.is_grad_enabled() and _layer._legorl_checkpoint_on:
                return checkpoint(_inner, *args, use_reentrant=False, **kwargs)
            return _inner(*args, **kwargs)

        layer.forward = forward
        layer._legorl_checkpointed = True
        layer._legorl_checkpoint_on = True
    return len(layers)


def set_activation_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Turn the recompute of `enable_activation_checkpointing` on or off for the next forwards (same
    gradients either way: it trades compute for memory only)."""
    for layer in decoder_layers(model):
        if getattr(layer, "_legorl_checkpointed", False):
            layer._legorl_checkpoint_on = on


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


def shared_cost(lengths: Sequence[int], prefix: Sequence[int], groups: Sequence[str], rows: Sequence[int]) -> int:
    """Positions a shared-prefix forward computes for `rows`: each group's prefix once, then every row's
    suffix padded to the longest suffix."""
    if not rows:
        return 0
    once = {groups[i]: prefix[i] for i in rows}
    return sum(once.values()) + len(rows) * max(lengths[i] - prefix[i] for i in rows)


def group_micro_batches(lengths: Sequence[int], prefix: Sequence[int], groups: Sequence[str],
                        rows: Sequence[int], budget: int | None, size: int) -> list[list[int]]:
    """Micro-batches that keep a group's rows together, so its prefix is forwarded once. With `budget`:
    groups packed largest first while `shared_cost` stays within it (a group over the budget is split);
    else `size` rows each, the rows in group order."""
    by_group: dict[str, list[int]] = {}
    for i in rows:
        by_group.setdefault(groups[i], []).append(i)
    if budget is None:
        return fixed_micro_batches([i for g in by_group.values() for i in g], size)
    units: list[list[int]] = []
    for g_rows in by_group.values():  # a group over the budget alone: pieces that fit
        cur: list[int] = []
        for i in sorted(g_rows, key=lambda i: (-lengths[i], i)):
            if cur and shared_cost(lengths, prefix, groups, [*cur, i]) > budget:
                units.append(cur)
                cur = []
            cur.append(i)
        units.append(cur)
    units.sort(key=lambda u: (-shared_cost(lengths, prefix, groups, u), u[0]))
    out: list[list[int]] = []
    cur = []
    for u in units:
        if cur and shared_cost(lengths, prefix, groups, [*cur, *u]) > budget:
            out.append(cur)
            cur = []
        cur = [*cur, *u]
    if cur:
        out.append(cur)
    return out


def balance_groups(lengths: Sequence[int], prefix: Sequence[int], groups: Sequence[str],
                   world: int) -> list[list[int]]:
    """Rows split over `world` ranks a whole group at a time, balanced by shared cost (largest first to
    the lightest rank); each rank's rows ascending. Deterministic, like `balance_rows`."""
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    if len(by_group) < world:  # too few groups to give every rank one: split rows instead
        return balance_rows(lengths, world)
    units = sorted(by_group.values(), key=lambda u: (-shared_cost(lengths, prefix, groups, u), u[0]))
    shares: list[list[int]] = [[] for _ in range(world)]
    load = [0] * world
    for u in units:
        r = min(range(world), key=lambda r: (load[r], r))
        shares[r].extend(u)
        load[r] += shared_cost(lengths, prefix, groups, u)
    return [sorted(s) for s in shares]


def mini_batch_rows(group_ids: list[str], groups_per_step: int | None) -> list[list[int]]:
    """A batch's rows split into optimizer steps of `groups_per_step` whole groups each, groups in the batch's order
    and rows in theirs (`trainer.ppo_mini_batch_size`); one list, the whole batch, when None."""
    if groups_per_step is None:
        return [list(range(len(group_ids)))]
    rows_of: dict[str, list[int]] = {}
    for i, g in enumerate(group_ids):
        rows_of.setdefault(g, []).append(i)
    groups = list(rows_of.values())
    return [sorted(row for group in groups[i:i + groups_per_step] for row in group)
            for i in range(0, len(groups), groups_per_step)]
