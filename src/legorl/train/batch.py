"""The trainer's one form of the data: trials with tokens, collated into right-padded tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from legorl.trial import TrialResult


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T] float: 1 on policy tokens
    behav_logp: torch.Tensor  # [B, T] float: rollout engine logprobs (0 off-mask)
    rewards: torch.Tensor  # [B]
    group_ids: list[str]
    routed_experts: list | None = None  # per-row numpy [n-1, L, k] (R3)
    prompt_lens: list[int] | None = None  # tokens before each row's first policy token

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> TrainBatch:
        """The tensors on `device` (a no-op on their own device)."""
        if self.input_ids.device == device:
            return self
        return TrainBatch(self.input_ids.to(device), self.attention_mask.to(device), self.mask.to(device),
                          self.behav_logp.to(device), self.rewards.to(device), self.group_ids,
                          self.routed_experts, self.prompt_lens)

    def select(self, idx: list[int]) -> TrainBatch:
        """Rows `idx`, trimmed to their own longest sequence."""
        am = self.attention_mask[idx]
        t = int(am.sum(-1).max().item()) if len(idx) else 0
        return TrainBatch(
            self.input_ids[idx, :t], am[:, :t], self.mask[idx, :t], self.behav_logp[idx, :t],
            self.rewards[idx], [self.group_ids[i] for i in idx],
            [self.routed_experts[i] for i in idx] if self.routed_experts is not None else None,
            [self.prompt_lens[i] for i in idx] if self.prompt_lens is not None else None,
        )


def trainable(trials: list[TrialResult]) -> list[TrialResult]:
    """The trials that carry at least one policy token (the rest have nothing to learn from)."""
    return [r for r in trials if r.tokens is not None and r.tokens.num_policy_tokens > 0]


def collate(trials: list[TrialResult], pad_id: int = 0) -> TrainBatch:
    """Rows in `trials` order; every trial must have tokens (see `trainable`)."""
    if not trials:
        raise ValueError("cannot collate an empty list of trials")
    rollouts = [r.tokens for r in trials]
    if any(r is None for r in rollouts):
        raise ValueError("cannot collate a trial without tokens: filter with trainable() first")
    t = max(len(r.token_ids) for r in rollouts)
    b = len(rollouts)
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    am = torch.zeros((b, t), dtype=torch.long)
    mask = torch.zeros((b, t), dtype=torch.float32)
    lp = torch.zeros((b, t), dtype=torch.float32)
    for i, r in enumerate(rollouts):
        n = len(r.token_ids)
        ids[i, :n] = torch.tensor(r.token_ids)
        am[i, :n] = 1
        mask[i, :n] = torch.tensor(r.response_mask, dtype=torch.float32)
        lp[i, :n] = torch.tensor(r.logprobs, dtype=torch.float32)
    mask[:, 0] = 0  # position 0 has no context: never a trainable token
    routed = [r.routed_experts for r in rollouts] if any(r.routed_experts is not None for r in rollouts) else None
    return TrainBatch(
        ids, am, mask, lp * mask, torch.tensor([float(r.reward or 0.0) for r in trials]),
        [r.group_id for r in trials], routed, [r.prompt_len for r in rollouts],
    )
