"""Typed records of the worker layer: what a trial is and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from legorl.rollout import Rollout
from legorl.tasks.model import Task

Outcome = Literal[
    "solved", "failed", "timeout", "context_overflow", "env_setup_failed", "agent_error", "verifier_error"
]
# outcomes that say nothing about the policy: dropped before training by default
INFRA_OUTCOMES: tuple[str, ...] = ("env_setup_failed", "verifier_error")


@dataclass(frozen=True)
class TrialSpec:
    task: Task
    attempt: int = 0
    group_id: str = ""  # GRPO group: the n attempts of one task in one step share it
    step: int = 0
    trial_id: str = ""


@dataclass
class TrialResult:
    spec: TrialSpec
    outcome: Outcome
    reason: str
    reward: float | None
    rollout: Rollout | None  # None only when no token was ever generated
    turns: int = 0
    duration_s: float = 0.0
    artifacts_dir: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
