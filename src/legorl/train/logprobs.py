"""Teacher-forced token logprobs (and entropy) of a batch under a model.

The model's own forward runs (so FSDP2 hooks and R3 replay hooks apply), with `logits_to_keep`
limited to positions that precede a policy token in some row: a long multi-turn prompt costs a
decoder pass but no vocabulary-sized logits.
"""

from __future__ import annotations

import torch


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(input_ids[b, t] | input_ids[b, :t]) at masked positions; zeros elsewhere.

    The sampler's distribution is softmax(logits / T) (raw logits when T == 0), so the same scaling
    is applied here. Right padding: position ids are 0..T-1. Returns (logp [B, T], entropy or None).
    """
    keep = torch.nonzero(mask[:, 1:].any(0)).flatten()  # positions p whose next token is trained
    if keep.numel() == 0:
        keep = torch.tensor([0], device=input_ids.device)
    pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, logits_to_keep=keep, use_cache=False
    ).logits  # [B, K, V]
    nxt = (keep + 1).clamp(max=input_ids.shape[1] - 1)
    targets = input_ids[:, nxt]
    sel = (mask[:, nxt] > 0) & (keep + 1 < input_ids.shape[1])
    flat_logits = logits[sel]  # [N, V]
    flat_targets = targets[sel]
    lps, ents = [], []
    for i in range(0, flat_logits.shape[0], chunk):
        lg = flat_logits[i : i + chunk].float()
        if temperature > 0:
            lg = lg / temperature
        logsm = torch.log_softmax(lg, dim=-1)
        lps.append(logsm.gather(1, flat_targets[i : i + chunk, None])[:, 0])
        if with_entropy:
            ents.append(-(logsm.exp() * logsm).sum(-1))
    b_idx, k_idx = torch.nonzero(sel, as_tuple=True)
    where = (b_idx, keep[k_idx] + 1)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=input_ids.device)
    # keep the graph connected even with no trained token (FSDP ranks must all run backward)
    anchor = logits.sum() * 0.0
    logp = zeros.index_put(where, torch.cat(lps) if lps else zeros[0, :0]) + anchor
    entropy = zeros.index_put(where, torch.cat(ents) if ents else zeros[0, :0]) if with_entropy else None
    return logp, entropy


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
