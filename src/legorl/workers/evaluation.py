"""What `legorl eval` and `legorl infer` share: k trials per task against a policy, pass@k.

The policy runs in an in-process runtime (`legorl.runtime.inprocess.PolicySpec`): a local model
behind the proxy (tokens captured), a remote OpenAI-compatible server (`base_url`: any served
model; tokens are NOT captured, nothing to train on), or nothing for scaffolds that never call a
model (oracle, nop).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.agents.base import SCAFFOLDS
from legorl.plugins import load_object
from legorl.runtime.inprocess import PolicySpec, policy_runtime
from legorl.tasks.model import Task
from legorl.trial import TrialResult, TrialSpec
from legorl.workers.artifacts import result_record
from legorl.workers.config import WorkerConfig
from legorl.workers.runner import OnDone

__all__ = ["EvalReport", "PolicySpec", "TaskStats", "evaluate", "is_solved", "make_specs", "pass_at_k",
           "scaffold_class"]


def scaffold_class(spec: str) -> type:
    """The scaffold class behind a registered name or `module:Class` (ValueError when unknown)."""
    import legorl.agents  # noqa: F401  (registers the built-in names)

    return load_object(spec, SCAFFOLDS, "agent")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if n < 1 or k < 1:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def is_solved(r: TrialResult) -> bool:
    """A sample counts as correct when the verifier gave full reward (whatever else happened)."""
    return r.reward is not None and r.reward >= 1.0


@dataclass
class TaskStats:
    task_id: str
    n: int = 0
    solved: int = 0
    rewards: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: list[str] = field(default_factory=list)

    def pass_at(self, k: int) -> float:
        return pass_at_k(self.n, self.solved, k)


@dataclass
class EvalReport:
    k: int
    results: list[TrialResult]
    tasks: dict[str, TaskStats]

    @classmethod
    def from_results(cls, results: Sequence[TrialResult], k: int) -> EvalReport:
        tasks: dict[str, TaskStats] = {}
        for r in results:
            s = tasks.setdefault(r.spec.task.id, TaskStats(r.spec.task.id))
            s.n += 1
            s.solved += is_solved(r)
            s.rewards.append(float(r.reward or 0.0))
            s.outcomes[r.outcome] += 1
            if r.reason and r.outcome not in ("solved", "failed"):
                s.reasons.append(r.reason)
        return cls(k, list(results), tasks)

    def mean_pass(self, k: int) -> float:
        return sum(s.pass_at(k) for s in self.tasks.values()) / len(self.tasks) if self.tasks else 0.0

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "pass@1": self.mean_pass(1),
            f"pass@{self.k}": self.mean_pass(self.k),
            "num_tasks": len(self.tasks),
            "num_trials": len(self.results),
            "outcomes": dict(self.outcomes),
            "tasks": {
                t: {"n": s.n, "solved": s.solved, "pass@1": s.pass_at(1), f"pass@{self.k}": s.pass_at(self.k),
                    "outcomes": dict(s.outcomes)}
                for t, s in self.tasks.items()
            },
            "trials": [result_record(r) for r in self.results],
        }

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "results.json"
        path.write_text(json.dumps(self.to_json(), indent=1, default=str))
        return path


def make_specs(tasks: Sequence[Task], k: int, step: int = 0) -> list[TrialSpec]:
    """k attempts per task; the attempts of one task share a group id."""
    return [TrialSpec(task=t, attempt=a, group_id=t.id, step=step) for t in tasks for a in range(k)]


async def evaluate(
    tasks: Sequence[Task], k: int, config: WorkerConfig, policy: PolicySpec, on_result: OnDone | None = None
) -> EvalReport:
    """Run k trials per task with one scaffold and one policy; the report holds every trial."""
    needs_model = getattr(scaffold_class(config.scaffold), "needs_model", True)
    async with policy_runtime(policy, config, needs_model) as runtime:
        results = await runtime.runner.run(make_specs(tasks, k), config.limits.temperature, on_result)
    return EvalReport.from_results(results, k)
