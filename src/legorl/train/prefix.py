"""Shared-prefix forwards: the tokens that several rows of a micro-batch share are computed once.

A GRPO group is n trials of one prompt; in the demo 32 rows x ~156 tokens hold ~1,800 distinct tokens.
Each micro-batch is cut into levels: a root prefix that all its rows share, then each group's prefix (the
longest common prefix of its rows' tokens, and of their recorded routing under R3), then every row's own
suffix. Level l runs as one batched model forward over its nodes (padded) whose cache holds the keys and
values of every ancestor node, gathered per node *with* their autograd graph: attention, position ids and
hence every hidden state equal those of the unshared row, and backward sums each shared token's gradient
over the rows that read it. The outputs (hidden states, or logits under FSDP2) are gathered back to
(row, position) pairs, so the loss is computed exactly as on the unshared rows.

The cache layers are stateless on replay (a level records its own keys by overwriting a slot), so
activation checkpointing's recompute and FSDP2's hooks see ordinary module calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer


@dataclass
class Level:
    """One batched forward: `n` nodes, each a run of tokens shared by a set of rows."""

    ids: torch.Tensor  # [n, L] long (padding where the node is shorter)
    pos: torch.Tensor  # [n, L] long: absolute positions (start + 0..L-1)
    valid: torch.Tensor  # [n, L] bool
    ancestors: list[torch.Tensor]  # per earlier level j: [n] index of this node's ancestor there
    row_node: torch.Tensor  # [B] this level's node of each row
    rep: list[int]  # a row through each node (its routing is the node's)
    starts: list[int]  # each node's first absolute position


@dataclass
class PrefixPlan:
    """A micro-batch cut into levels; `cuts[b, l]` is the first position of row b in level l."""

    levels: list[Level]
    cuts: torch.Tensor  # [B, K] long

    @property
    def computed_tokens(self) -> int:
        """Positions the forwards compute (padding included), against rows x longest row unshared."""
        return sum(int(lv.ids.numel()) for lv in self.levels)


def _routing_rows(r, cap: int) -> np.ndarray:
    """A row's recorded routing over positions 0..cap-1 as [cap, L*k], -1 where none was recorded."""
    a = np.asarray(r[:cap]).reshape(min(cap, len(r)), -1)
    out = np.full((cap, a.shape[1]), -1, dtype=np.int64)
    out[: a.shape[0]] = a
    return out


def _lcp(ids: torch.Tensor, lengths: Sequence[int], rows: Sequence[int], routing: list | None,
         start: int) -> int:
    """Longest common prefix of `rows` (tokens, and under R3 their recorded routing: a shared token must
    route alike in every row), capped so every row keeps at least one token after it; never below `start`."""
    cap = min(lengths[b] for b in rows) - 1
    if len(rows) == 1:
        return max(start, cap)
    if cap <= start:
        return start
    same = (ids[list(rows), :cap] == ids[rows[0], :cap]).all(0).cpu()
    if routing is not None:
        present = [routing[b] is not None for b in rows]
        if any(present) and not all(present):
            return start
        if all(present):
            ref = _routing_rows(routing[rows[0]], cap)
            for b in rows[1:]:
                same &= torch.from_numpy((_routing_rows(routing[b], cap) == ref).all(-1))
    miss = torch.nonzero(~same).flatten()
    return max(start, int(miss[0]) if miss.numel() else cap)


def plan_prefixes(input_ids: torch.Tensor, attention_mask: torch.Tensor, group_ids: Sequence[str],
                  routed_experts: list | None = None, fixed_levels: bool = False,
                  pad_id: int = 0) -> PrefixPlan:
    """Cut a right-padded micro-batch into root / group / row levels. With `fixed_levels` the plan always
    has three levels (a level nobody shares is one padding column), so FSDP2 ranks run the same forwards."""
    lengths = attention_mask.sum(-1).tolist()
    b_rows = list(range(len(lengths)))
    root = _lcp(input_ids, lengths, b_rows, routed_experts, 0) if len(b_rows) > 1 else 0
    clusters: dict[str, list[int]] = {}
    for b in b_rows:
        clusters.setdefault(group_ids[b], []).append(b)
    group_cut = {g: _lcp(input_ids, lengths, rows, routed_experts, root) for g, rows in clusters.items()}
    cuts = [[0, root, group_cut[group_ids[b]]] for b in b_rows]
    keep = [0, 1, 2]
    if not fixed_levels:  # drop a level no row has tokens in
        keep = [k for k in keep if k == 2 or any(c[k + 1] > c[k] for c in cuts)]
    cuts_t = torch.tensor([[c[k] for k in keep] for c in cuts], dtype=torch.long)
    node_rows: list[list[list[int]]] = []
    for k in keep:
        if k == 0:
            node_rows.append([b_rows])
        elif k == 1:
            node_rows.append(list(clusters.values()))
        else:
            node_rows.append([[b] for b in b_rows])
    levels: list[Level] = []
    dev = input_ids.device
    for li, nodes in enumerate(node_rows):
        starts = [int(cuts_t[rows[0], li]) for rows in nodes]
        ends = [int(cuts_t[rows[0], li + 1]) if li + 1 < len(keep) else lengths[rows[0]] for rows in nodes]
        width = max(1, max(e - s for s, e in zip(starts, ends, strict=True)))
        ids = torch.full((len(nodes), width), pad_id, dtype=torch.long)
        valid = torch.zeros((len(nodes), width), dtype=torch.bool)
        for i, (rows, s, e) in enumerate(zip(nodes, starts, ends, strict=True)):
            ids[i, : e - s] = input_ids[rows[0], s:e].cpu()
            valid[i, : e - s] = True
        pos = torch.tensor(starts, dtype=torch.long)[:, None] + torch.arange(width)[None, :]
        row_node = torch.empty(len(b_rows), dtype=torch.long)
        for i, rows in enumerate(nodes):
            row_node[rows] = i
        reps = [rows[0] for rows in nodes]
        ancestors = [levels[j].row_node[reps] for j in range(li)]
        levels.append(Level(ids.to(dev), pos.to(dev), valid.to(dev), [a.to(dev) for a in ancestors],
                            row_node.to(dev), reps, starts))
    return PrefixPlan(levels, cuts_t.to(dev))


class _LevelLayer(DynamicLayer):
    """One decoder layer's cache for one level: prepends the ancestors' keys/values (gathered per node,
    graph kept) and records this level's own; `update` is idempotent so a checkpoint recompute is safe."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
        super().__init__()
        self.past = past
        self.past_len = sum(k.shape[-2] for k, _, _ in past)
        self.own: tuple[torch.Tensor, torch.Tensor] | None = None
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        self.own = (key_states, value_states)
        if not self.past:
            return key_states, value_states
        keys = torch.cat([k.index_select(0, idx) for k, _, idx in self.past] + [key_states], dim=-2)
        values = torch.cat([v.index_select(0, idx) for _, v, idx in self.past] + [value_states], dim=-2)
        return keys, values

    def get_seq_length(self) -> int:
        return self.past_len

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.past_len + query_length, 0


def _level_cache(n_layers: int, recorded: list[list[tuple[torch.Tensor, torch.Tensor]]],
                 ancestors: list[torch.Tensor]) -> Cache:
    layers = [_LevelLayer([(recorded[j][i][0], recorded[j][i][1], ancestors[j]) for j in range(len(ancestors))])
              for i in range(n_layers)]
    return Cache(layers=layers)


def locate(plan: PrefixPlan, rows: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(level, node, offset) of each (row, position) pair."""
    starts = plan.cuts[rows]  # [N, K]
    level = (starts <= positions[:, None]).sum(-1) - 1
    offset = positions - starts.gather(1, level[:, None])[:, 0]
    node = torch.stack([lv.row_node for lv in plan.levels])[level, rows]
    return level, node, offset


def shared_outputs(model, plan: PrefixPlan, rows: torch.Tensor, positions: torch.Tensor, n_layers: int,
                   logits: bool, on_level=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's final hidden states (or with `logits`, its own head's logits) at (row, position) pairs,
    computed level by level; `on_level(level)` runs before each forward (R3 points the routers at the
    level's recorded routing there). Returns ([N, D] outputs, a zero scalar tied to every forward).

    With `logits` (FSDP2: the head's weight is whole only inside the model's forward) the last level's
    forward runs the head on every pair's hidden state at once, [1, N, H], through a pre-hook on the head:
    one matmul of the shape the unshared path's chunked head uses, so the rounding matches it too."""
    level, node, offset = locate(plan, rows, positions)
    recorded: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
    parts: list[torch.Tensor] = []
    flat_index = torch.zeros_like(rows)
    seen: list[torch.Tensor] = []
    state = {"base": 0, "level": 0}

    def grab(_module, _inputs, output):
        seen.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    def take(li: int) -> None:  # this level's needed hidden states into `parts`
        here = level == li
        need, inv = torch.unique(offset[here], return_inverse=True)
        hidden = seen[-1][:, need]
        flat_index[here] = state["base"] + node[here] * need.numel() + inv
        state["base"] += hidden.shape[0] * hidden.shape[1]
        parts.append(hidden.reshape(-1, hidden.shape[-1]))

    def gathered() -> torch.Tensor:
        return torch.cat(parts)[flat_index]

    head = model.get_output_embeddings() if logits else None
    last = len(plan.levels) - 1
    handles = [model.get_decoder().register_forward_hook(grab)]
    if head is not None:
        def swap(_module, args):
            if state["level"] != last:  # earlier levels call the head on no position
                return args
            take(last)
            return (gathered()[None],)

        handles.append(head.register_forward_pre_hook(swap))
    anchor = None
    out = None
    try:
        for li, lv in enumerate(plan.levels):
            cache = _level_cache(n_layers, recorded, lv.ancestors)
            past_valid = [plan.levels[j].valid.index_select(0, lv.ancestors[j]) for j in range(li)]
            am = torch.cat([*past_valid, torch.ones_like(lv.valid)], dim=1).long()
            if on_level is not None:
                on_level(lv)
            state["level"] = li
            keep = torch.zeros(0 if (li < last or head is None) else 1, dtype=torch.long, device=rows.device)
            out = model(input_ids=lv.ids, attention_mask=am, position_ids=lv.pos, cache=cache, use_cache=True,
                        logits_to_keep=keep).logits
            recorded.append([layer.own for layer in cache.layers])
            if head is None or li < last:
                take(li)
            a = seen[-1].sum() * 0.0
            anchor = a if anchor is None else anchor + a
    finally:
        for h in handles:
            h.remove()
    assert anchor is not None and out is not None
    return (out[0] if head is not None else gathered()), anchor


def routing_for(level: Level, routed_experts: list, num_layers: int, top_k: int) -> torch.Tensor:
    """The level's R3 routing, [n * L, layers, k] in the forward's token order (-1: route freely)."""
    n, width = level.ids.shape
    out = torch.full((n, width, num_layers, top_k), -1, dtype=torch.long)
    for i, (b, s) in enumerate(zip(level.rep, level.starts, strict=True)):
        r = routed_experts[b]
        if r is None:
            continue
        t = torch.as_tensor(np.asarray(r[s : s + width]), dtype=torch.long)
        m = int(level.valid[i].sum())
        out[i, : min(m, t.shape[0])] = t[:m]
    return out.reshape(-1, num_layers, top_k)


def group_prefix_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         group_ids: Sequence[str]) -> list[int]:
    """Each row's shared-prefix length within its group over the whole batch (tokens only): what the
    micro-batch planner counts as computed once per group."""
    lengths = attention_mask.sum(-1).tolist()
    groups: dict[str, list[int]] = {}
    for b, g in enumerate(group_ids):
        groups.setdefault(g, []).append(b)
    out = [0] * len(lengths)
    for rows in groups.values():
        p = _lcp(input_ids, lengths, rows, None, 0) if len(rows) > 1 else 0
        for b in rows:
            out[b] = p
    return out
