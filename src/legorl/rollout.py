"""The Rollout: the unit of training data, produced by a worker from the proxy's accumulator.

Token-level arrays are aligned with `token_ids`. `response_mask[i] == 1` marks a token the policy
sampled (its `logprobs[i]` is the behaviour logprob); template, user and tool tokens are 0 and
their logprob slot is 0.0 (never used). No transcript is re-tokenized to build one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Rollout:
    trial_id: str
    task_id: str
    token_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]
    reward: float = 0.0
    outcome: str = "failed"
    reason: str = ""
    attempt: int = 0
    group_id: str = ""  # trials of the same prompt share it (GRPO / RLOO groups)
    weight_versions: list[int] = field(default_factory=list)  # per token, -1 where mask == 0
    routed_experts: np.ndarray | None = None  # [len(token_ids) - 1, moe_layers, top_k]: position p's routing
    num_turns: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.response_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"rollout {self.trial_id}: token_ids ({n}), response_mask ({len(self.response_mask)}) and "
                f"logprobs ({len(self.logprobs)}) must have the same length"
            )
        if not self.group_id:
            self.group_id = self.task_id

    @property
    def num_policy_tokens(self) -> int:
        return int(sum(self.response_mask))

    @property
    def prompt_len(self) -> int:
        """Tokens before the first policy token (the initial prompt)."""
        for i, m in enumerate(self.response_mask):
            if m:
                return i
        return len(self.token_ids)

    @property
    def min_weight_version(self) -> int:
        vs = [v for v in self.weight_versions if v >= 0]
        return min(vs) if vs else -1
