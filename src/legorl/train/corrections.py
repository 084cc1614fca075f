"""Off-policy corrections, chosen per run in `[algorithm]`: what the trainer does with tokens sampled by
other weights (an older version in async mode, or an engine whose numerics differ).

Three policies meet in one update: the behaviour policy mu (the rollout's recorded logprobs), the
proximal policy (the trainer's logprobs before this update, `old_logp`) and the policy being trained.
The PPO ratio is clipped against the proximal policy (decoupled PPO; `ppo_anchor`), so the trust
region sits around the current weights however stale the data is; the gap proximal / mu is handled
here, per token ratio r_t = exp(old_logp_t - behav_logp_t):

- `rollout_is` (weights on the loss): `token` min(r_t, C); `sequence` min(prod_t r_t, C); `masked`
  r_t where low <= r_t <= C, else 0 (the token keeps its place in the normalisation but gives no gradient);
- `rollout_rs` (rejection, applied to the loss mask so rejected tokens also leave the normalisation):
  `token` drops tokens whose r_t leaves [low, high] (two-sided, IcePop-style); `geometric` drops whole
  rollouts whose geometric-mean ratio exp(mean_t log r_t) leaves [low, high] (length-independent, unlike
  the sequence product).

Both compose (e.g. token IS plus geometric rejection). Metrics: ESS of the weights, share of tokens
masked, share of rollouts rejected, and the raw ratio's spread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from legorl.config.training import AlgorithmSection
from legorl.train.losses import rollout_is_weights


@dataclass
class Correction:
    weights: torch.Tensor | None  # [B, T] detached loss weights (None: all 1)
    mask: torch.Tensor  # [B, T] the loss mask after rejection (the input mask when nothing was rejected)
    metrics: dict[str, float] = field(default_factory=dict)


def ess(w: torch.Tensor) -> float:
    """Effective sample size fraction (sum w)^2 / (n sum w^2) in (0, 1]; 1 for equal weights, 0 if all are 0."""
    if w.numel() == 0:
        return 1.0
    return float(w.sum() ** 2 / (w.numel() * (w**2).sum()).clamp(min=1e-12))


def masked_is_weights(log_r: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Masked IS: the untruncated token ratio inside [low, high], 0 outside (and off the mask)."""
    r = torch.exp(log_r.clamp(-20, 20))
    keep = (r >= low) & (r <= high) & (mask > 0)
    return torch.where(keep, r, torch.zeros_like(r))


def token_rejection(log_r: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Two-sided token masking: the mask without tokens whose ratio leaves [low, high]."""
    r = torch.exp(log_r.clamp(-20, 20))
    return mask * ((r >= low) & (r <= high)).to(mask.dtype)


def geometric_rejection(log_r: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Sequence rejection: the mask without rollouts whose geometric-mean ratio leaves [low, high]."""
    n = mask.sum(-1)
    geo = torch.exp((log_r * mask).sum(-1) / n.clamp(min=1))
    keep = ((geo >= low) & (geo <= high)) | (n == 0)
    return mask * keep.to(mask.dtype).unsqueeze(-1)


def off_policy_correction(old_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                          algo: AlgorithmSection) -> Correction:
    """The loss weights and loss mask `algo` asks for, with their metrics (see the module docstring)."""
    log_r = ((old_logp - behav_logp) * mask).detach()
    metrics: dict[str, float] = {}
    on = mask > 0
    n_tok = float(on.sum())
    if n_tok:
        r = torch.exp(log_r[on].clamp(-20, 20))
        metrics["rollout_corr/ratio_min"] = float(r.min())
        metrics["rollout_corr/ratio_max"] = float(r.max())
    out_mask = mask
    if algo.rollout_rs == "token":
        out_mask = token_rejection(log_r, mask, algo.rollout_rs_low, algo.rollout_rs_high)
    elif algo.rollout_rs == "geometric":
        out_mask = geometric_rejection(log_r, mask, algo.rollout_rs_low, algo.rollout_rs_high)
    elif algo.rollout_rs != "none":
        raise ValueError(f"unknown rollout_rs mode {algo.rollout_rs!r}")
    if algo.rollout_rs != "none":
        rows = mask.sum(-1) > 0
        dropped_rows = rows & (out_mask.sum(-1) == 0)
        metrics["rollout_rs/masked_frac"] = float((mask - out_mask).sum()) / max(n_tok, 1.0)
        metrics["rollout_rs/rejected_frac"] = float(dropped_rows.sum()) / max(float(rows.sum()), 1.0)
    weights = None
    if algo.rollout_is == "masked":
        weights = masked_is_weights(log_r, out_mask, algo.rollout_is_low, algo.rollout_is_threshold)
        kept = out_mask > 0
        metrics["rollout_is/masked_frac"] = float((weights[kept] == 0).sum()) / max(float(kept.sum()), 1.0)
        metrics["rollout_is/ess"] = ess(weights[kept])
    elif algo.rollout_is != "none":
        isw = rollout_is_weights(old_logp, behav_logp, out_mask, algo.rollout_is, algo.rollout_is_threshold)
        assert isw is not None
        weights = isw.weights
        metrics["rollout_is/ess"] = isw.ess
    if weights is not None and (out_mask > 0).any():
        metrics["rollout_is/weight_mean"] = float(weights[out_mask > 0].mean())
    return Correction(weights, out_mask, metrics)
