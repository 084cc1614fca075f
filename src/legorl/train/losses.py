"""Policy losses, importance correction and aggregation over response masks.

All tensors are [B, T] aligned on token positions; `mask` is 1 on policy tokens. `logp` are the
current policy's logprobs (with grad), `old_logp` the trainer's pre-update logprobs, `behav_logp`
the rollout engine's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """token-mean: every policy token weighs the same; seq-mean-*: every rollout weighs the same."""
    if mode == "token-mean":
        return masked_mean(loss, mask)
    per_seq = (loss * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg_mode {mode!r}")
    has = (mask.sum(-1) > 0).float()
    return (per_seq * has).sum() / has.sum().clamp(min=1)


@dataclass
class PolicyLossOut:
    loss: torch.Tensor
    clipfrac: float
    ppo_kl: float


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_c: float = 3.0,
    weights: torch.Tensor | None = None,
    agg: str = "token-mean",
) -> PolicyLossOut:
    """Token-level clipped surrogate with dual clip for negative advantages (Ye et al. 2020)."""
    log_ratio = (logp - old_logp).clamp(-20, 20)
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(pg1, pg2)
    dual = torch.minimum(clipped, -adv * clip_c)
    loss = torch.where(adv < 0, dual, clipped)
    if weights is not None:
        loss = loss * weights
    with torch.no_grad():
        clipfrac = masked_mean((pg2 > pg1).float(), mask).item()
        ppo_kl = masked_mean(-log_ratio, mask).item()
    return PolicyLossOut(aggregate(loss, mask, agg), clipfrac, ppo_kl)


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    weights: torch.Tensor | None = None,
) -> PolicyLossOut:
    """GSPO (Zheng et al. 2025): the sequence ratio exp(mean_t log r_t), normalized by response length,
    clipped in per-token units; token form s_it = sg(s_i) * exp(logp_t - sg(logp_t)) keeps per-token
    gradients. Aggregated per sequence (seq-mean-token-mean)."""
    lengths = mask.sum(-1).clamp(min=1)
    seq_log_ratio = ((logp - old_logp) * mask).sum(-1) / lengths
    log_s = seq_log_ratio.detach().unsqueeze(-1) + logp - logp.detach()
    s = torch.exp(log_s.clamp(max=10.0))
    pg1 = -adv * s
    pg2 = -adv * s.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(pg1, pg2)
    if weights is not None:
        loss = loss * weights
    with torch.no_grad():
        clipfrac = masked_mean((pg2 > pg1).float(), mask).item()
        ppo_kl = masked_mean(-(logp - old_logp), mask).item()
    return PolicyLossOut(aggregate(loss, mask, "seq-mean-token-mean"), clipfrac, ppo_kl)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(pi || ref) estimate; k3 = exp(ref - logp) - (ref - logp) - 1 (non-negative)."""
    d = (ref_logp - logp).clamp(-20, 20)
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d**2
    return torch.exp(d) - d - 1


@dataclass
class ISWeights:
    weights: torch.Tensor  # [B, T], detached
    ess: float  # effective sample size fraction in (0, 1]


def rollout_is_weights(
    old_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor, mode: str, threshold: float
) -> ISWeights | None:
    """Truncated importance weights pi_old / pi_behaviour correcting rollout/trainer mismatch."""
    if mode == "none":
        return None
    log_w = (old_logp - behav_logp).detach() * mask
    if mode == "token":
        w = torch.exp(log_w.clamp(-20, 20)).clamp(max=threshold)
        flat = w[mask > 0]
    elif mode == "sequence":
        seq_w = torch.exp(log_w.sum(-1).clamp(-20, 20)).clamp(max=threshold)
        w = seq_w.unsqueeze(-1).expand_as(mask)
        flat = seq_w
    else:
        raise ValueError(f"unknown rollout_is mode {mode!r}")
    ess = (flat.sum() ** 2 / (flat.numel() * (flat**2).sum()).clamp(min=1e-12)).item() if flat.numel() else 1.0
    return ISWeights(w * mask, ess)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float = 0.2) -> torch.Tensor:
    """Clipped value loss (PPO critic)."""
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)


def ppo_policy_loss(logp, old_logp, adv, mask, algorithm, weights=None, agg: str = "token-mean") -> PolicyLossOut:
    """`policy_loss_mode = "ppo"`: the registered form (a custom loss takes the same arguments)."""
    return ppo_loss(logp, old_logp, adv, mask, algorithm.clip_ratio_low, algorithm.clip_ratio_high,
                    algorithm.clip_ratio_c, weights, agg)


def gspo_policy_loss(logp, old_logp, adv, mask, algorithm, weights=None, agg: str = "token-mean") -> PolicyLossOut:
    """`policy_loss_mode = "gspo"` (always sequence-mean aggregation)."""
    return gspo_loss(logp, old_logp, adv, mask, algorithm.clip_ratio_low, algorithm.clip_ratio_high, weights)
