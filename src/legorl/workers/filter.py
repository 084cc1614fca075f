"""Trajectory filter: which finished trials become training data.

Infra failures (the sandbox never started, the verifier could not run) say nothing about the policy, so by
default they are dropped; a trial without tokens has nothing to train on. A trial the verifier scored is
never dropped for its outcome, whatever `drop_outcomes` holds: its reward is the policy's, and a filter
that threw away some scored failures (a timeout, an agent crash) would bias every group's advantages. Every drop is counted by
outcome and by reason so a run's metrics show what was thrown away and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from legorl.trial import INFRA_OUTCOMES, TrialResult


@dataclass
class FilterStats:
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)  # by outcome ("no_rollout" for token-less trials)
    reasons: Counter[str] = field(default_factory=Counter)  # by "<outcome>: <reason>" (first 120 chars)

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def metrics(self, prefix: str = "filter/") -> dict[str, float]:
        out: dict[str, float] = {f"{prefix}kept": float(self.kept), f"{prefix}dropped": float(self.total_dropped)}
        out.update({f"{prefix}dropped_{k}": float(v) for k, v in self.dropped.items()})
        return out


class TrajectoryFilter:
    """Keeps trials with tokens that the verifier scored or whose outcome is not in `drop_outcomes`."""

    def __init__(self, drop_outcomes: Iterable[str] = INFRA_OUTCOMES):
        self.drop_outcomes = frozenset(drop_outcomes)

    def keep(self, result: TrialResult) -> str | None:
        """None to keep, else the drop key (an outcome or "no_rollout")."""
        if result.reward is None and result.outcome in self.drop_outcomes:
            return result.outcome
        if result.tokens is None:
            return "no_rollout"
        return None

    def __call__(self, results: Sequence[TrialResult]) -> tuple[list[TrialResult], FilterStats]:
        stats = FilterStats()
        kept: list[TrialResult] = []
        for r in results:
            key = self.keep(r)
            if key is None:
                kept.append(r)
                stats.kept += 1
            else:
                stats.dropped[key] += 1
                stats.reasons[f"{r.outcome}: {r.reason}"[:120]] += 1
        return kept, stats
