"""Advantage estimators over full multi-turn rollouts.

Outcome-reward estimators (GRPO, RLOO) give one scalar per rollout, broadcast to its policy tokens.
GAE runs over the policy tokens only (tool and template tokens are not actions), with the reward
on the last policy token, using a critic's values at those tokens.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch


@dataclass
class GroupStats:
    num_groups: int
    zero_std_groups: int  # groups whose rewards are all equal: zero advantage, no signal


def _groups(group_ids: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        out[g].append(i)
    return out


def mixed_group_rows(rewards: torch.Tensor, group_ids: list[str]) -> list[int]:
    """Rows of the groups whose rewards differ (the only ones with a non-zero group-relative advantage)."""
    return sorted(i for idx in _groups(group_ids).values()
                  if len(idx) > 1 and not torch.all(rewards[idx] == rewards[idx[0]]) for i in idx)


def grpo_advantages(
    rewards: torch.Tensor, group_ids: list[str], norm_by_std: bool = True, eps: float = 1e-6
) -> tuple[torch.Tensor, GroupStats]:
    """(r - mean_group) / (std_group + eps); std is the unbiased sample std. Zero-std groups give 0."""
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    zero = 0
    groups = _groups(group_ids)
    for idx in groups.values():
        r = rewards[idx].float()
        if len(idx) < 2 or torch.all(r == r[0]):
            zero += 1
            continue
        centered = r - r.mean()
        adv[idx] = centered / (r.std() + eps) if norm_by_std else centered
    return adv, GroupStats(len(groups), zero)


def rloo_advantages(rewards: torch.Tensor, group_ids: list[str]) -> tuple[torch.Tensor, GroupStats]:
    """Leave-one-out baseline: r_i - mean_{j != i} r_j."""
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    zero = 0
    groups = _groups(group_ids)
    for idx in groups.values():
        r = rewards[idx].float()
        n = len(idx)
        if n < 2 or torch.all(r == r[0]):
            zero += 1
            continue
        adv[idx] = r - (r.sum() - r) / (n - 1)
    return adv, GroupStats(len(groups), zero)


def gae_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the masked (policy) positions of each row; reward on the last policy token.

    rewards [B], values [B, T], mask [B, T]. Returns (advantages [B, T], returns [B, T]), zero off-mask.
    """
    adv = torch.zeros_like(values, dtype=torch.float32)
    ret = torch.zeros_like(values, dtype=torch.float32)
    for b in range(values.shape[0]):
        pos = torch.nonzero(mask[b] > 0).flatten()
        if pos.numel() == 0:
            continue
        v = values[b, pos].float()
        n = pos.numel()
        r = torch.zeros(n)
        r[-1] = rewards[b].float()
        last = 0.0
        a = torch.zeros(n)
        for t in range(n - 1, -1, -1):
            next_v = v[t + 1] if t + 1 < n else 0.0
            delta = r[t] + gamma * next_v - v[t]
            last = delta + gamma * lam * last
            a[t] = last
        adv[b, pos] = a
        ret[b, pos] = a + v
    return adv, ret


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Normalize masked entries to zero mean, unit variance (PPO's advantage whitening)."""
    m = mask > 0
    vals = x[m]
    if vals.numel() < 2:
        return x
    out = torch.zeros_like(x)
    out[m] = (vals - vals.mean()) / (vals.std() + eps)
    return out


def grpo_estimator(rewards: torch.Tensor, group_ids: list[str], algorithm) -> tuple[torch.Tensor, GroupStats]:
    """`adv_estimator = "grpo"`: the registered form (rewards [B], group ids, the algorithm section)."""
    return grpo_advantages(rewards, group_ids, norm_by_std=algorithm.norm_adv_by_std)


def rloo_estimator(rewards: torch.Tensor, group_ids: list[str], algorithm) -> tuple[torch.Tensor, GroupStats]:
    """`adv_estimator = "rloo"`."""
    return rloo_advantages(rewards, group_ids)
