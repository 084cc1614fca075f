"""Teacher-forced token logprobs (and entropy) of a batch under a model.

The model's own forward runs (so FSDP2 hooks and R3 replay hooks apply), and vocabulary logits are
computed only at positions that precede a policy token in some row: a long multi-turn prompt costs a
decoder pass but no vocabulary-sized logits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from legorl.train.prefix import Level, PrefixPlan, shared_outputs


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int = 256,
    prefix: PrefixPlan | None = None,
    on_level: Callable[[Level], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(input_ids[b, t] | input_ids[b, :t]) at masked positions; zeros elsewhere.

    The sampler's distribution is softmax(logits / T) (raw logits when T == 0), so the same scaling
    is applied here. Right padding: position ids are 0..T-1. Returns (logp [B, T], entropy or None).

    In one process the vocabulary projection runs here, `chunk` positions at a time and recomputed in
    backward, so only one chunk's [chunk, V] fp32 logits ever exist (a 150k vocabulary over thousands of
    response tokens would otherwise hold several full copies for backward). Under FSDP2 the model's own
    head computes the kept positions' logits (its sharded weight is gathered inside the forward).

    With `prefix` (train/prefix.py) the rows' shared prefixes are forwarded once, level by level
    (`on_level` runs before each level's forward); the outputs at every (row, position) are the same.
    """
    dev = input_ids.device
    keep = torch.nonzero(mask[:, 1:].any(0)).flatten()  # positions p whose next token is trained
    if keep.numel() == 0:
        keep = torch.tensor([0], device=dev)
    nxt = (keep + 1).clamp(max=input_ids.shape[1] - 1)
    targets = input_ids[:, nxt]
    sel = (mask[:, nxt] > 0) & (keep + 1 < input_ids.shape[1])
    b_idx, k_idx = torch.nonzero(sel, as_tuple=True)
    head = _plain_head(model)
    if prefix is not None:
        flat, anchor = shared_outputs(model, prefix, b_idx, keep[k_idx], _n_layers(model), head is None, on_level)
    else:
        pos = torch.arange(input_ids.shape[1], device=dev).unsqueeze(0).expand_as(input_ids)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, use_cache=False)
        if head is None:
            out = model(**kwargs, logits_to_keep=keep).logits  # [B, K, V]
        else:
            out = _hidden_states(model, kwargs)[:, keep]  # [B, K, H]
        flat = out[sel]
        # keep the graph connected even with no trained token (FSDP ranks must all run backward)
        anchor = out.sum() * 0.0
    flat_targets = targets[sel]
    grad = torch.is_grad_enabled()
    lps, ents = [], []
    for i in range(0, flat.shape[0], chunk):
        x, tgt = flat[i : i + chunk], flat_targets[i : i + chunk]
        if head is None:
            lp, ent = _stats(x, tgt, temperature, with_entropy)
        elif grad:
            lp, ent = checkpoint(_head_stats, x, tgt, head.weight, head.bias, temperature, with_entropy,
                                 use_reentrant=False)
        else:
            lp, ent = _head_stats(x, tgt, head.weight, head.bias, temperature, with_entropy)
        lps.append(lp)
        if with_entropy:
            ents.append(ent)
    where = (b_idx, keep[k_idx] + 1)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=dev)
    logp = zeros.index_put(where, torch.cat(lps) if lps else zeros[0, :0]) + anchor
    entropy = zeros.index_put(where, torch.cat(ents) if ents else zeros[0, :0]) if with_entropy else None
    return logp, entropy


def _n_layers(model) -> int:
    return int(model.config.num_hidden_layers)


def _plain_head(model) -> torch.nn.Linear | None:
    """The output projection when this process holds it whole (None under FSDP2 or an unusual head)."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if get is not None else None
    if not isinstance(head, torch.nn.Linear) or type(head.weight) is not torch.nn.Parameter:
        return None
    if getattr(model, "get_decoder", None) is None:
        return None
    return head


def _hidden_states(model, kwargs: dict) -> torch.Tensor:
    """The decoder's final (normed) hidden states [B, T, H], with the head run on no position."""
    seen: list[torch.Tensor] = []

    def grab(_module, _inputs, output):
        seen.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = model.get_decoder().register_forward_hook(grab)
    try:
        ids = kwargs["input_ids"]
        model(**kwargs, logits_to_keep=torch.zeros(0, dtype=torch.long, device=ids.device))
    finally:
        handle.remove()
    return seen[-1]


def _stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool):
    lg = logits.float()
    if temperature > 0:
        lg = lg / temperature
    logsm = torch.log_softmax(lg, dim=-1)
    lp = logsm.gather(1, targets[:, None])[:, 0]
    ent = -(logsm.exp() * logsm).sum(-1) if with_entropy else None
    return lp, ent


def _head_stats(hidden, targets, weight, bias, temperature: float, with_entropy: bool):
    return _stats(torch.nn.functional.linear(hidden, weight, bias), targets, temperature, with_entropy)


@torch.no_grad()
def fidelity(trainer_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Rollout-vs-trainer agreement over policy tokens: mean/max |Δ|, Pearson, KL estimate (k3)."""
    m = mask > 0
    a, b = trainer_logp[m].double(), behav_logp[m].double()
    if a.numel() == 0:
        return {}
    diff = (a - b).abs()
    pearson = float("nan")
    if a.numel() > 1 and a.std() > 0 and b.std() > 0:
        pearson = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    d = (a - b).clamp(-20, 20)
    return {
        "rollout_corr/abs_diff_mean": float(diff.mean()),
        "rollout_corr/abs_diff_max": float(diff.max()),
        "rollout_corr/pearson": pearson,
        "rollout_corr/kl": float((torch.exp(d) - d - 1).mean()),
    }
