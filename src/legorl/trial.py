"""The trial record: one per trial, from the worker that runs it to the trainer that learns from it.

`TrialSpec` says what to run; `TrialResult` is what came of it: outcome, reward, timings and,
when the policy generated anything, its `TrialTokens`, taken from the proxy's accumulator as they
were sampled (never re-tokenized). The trainer's only other form is the collated `TrainBatch`.

Token arrays are aligned with `token_ids`: `response_mask[i] == 1` marks a token the policy
sampled (its `logprobs[i]` is the behaviour logprob, `weight_versions[i]` the weights that sampled
it); template, user and tool tokens are 0, with logprob 0.0 and version -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from legorl.tasks.model import Task

Outcome = Literal[
    "solved", "failed", "timeout", "context_overflow", "env_setup_failed", "agent_error", "verifier_error",
    "infra_error",
]
# outcomes that say nothing about the policy: dropped before training by default. `infra_error`: the
# trial was lost outside the worker (its sandbox host actor died, no host was alive to run it).
INFRA_OUTCOMES: tuple[str, ...] = ("env_setup_failed", "verifier_error", "infra_error")


@dataclass(frozen=True)
class TrialSpec:
    task: Task
    attempt: int = 0
    group_id: str = ""  # GRPO group: the n attempts of one task in one step share it
    step: int = 0
    trial_id: str = ""


@dataclass
class TrialTokens:
    """What the policy saw and sampled in one trial (the proxy session's main branch)."""

    token_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]
    weight_versions: list[int] = field(default_factory=list)  # per token, -1 where mask == 0
    routed_experts: np.ndarray | None = None  # [len(token_ids) - 1, moe_layers, top_k]: position p's routing
    capture: dict[str, Any] = field(default_factory=dict)  # the proxy session's counters, branches, recomputes

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.response_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"token_ids ({n}), response_mask ({len(self.response_mask)}) and logprobs ({len(self.logprobs)}) "
                "must have the same length"
            )

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

    def policy_versions(self) -> list[int]:
        """Weight versions of the policy tokens."""
        return [v for v, m in zip(self.weight_versions, self.response_mask, strict=False) if m and v >= 0]


@dataclass
class TrialResult:
    """One trial, start to end. `tokens` is None only when no token was ever generated."""

    spec: TrialSpec
    outcome: Outcome
    reason: str
    reward: float | None  # None: the verifier gave none (infra failure)
    tokens: TrialTokens | None = None
    turns: int = 0
    duration_s: float = 0.0
    artifacts_dir: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id

    @property
    def task_id(self) -> str:
        return self.spec.task.id

    @property
    def group_id(self) -> str:
        return self.spec.group_id or self.spec.task.id

    def policy_versions(self) -> list[int]:
        """Weight versions of the policy tokens (empty without tokens)."""
        return self.tokens.policy_versions() if self.tokens is not None else []
