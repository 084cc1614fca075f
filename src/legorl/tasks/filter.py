"""Task filters: static selection by metadata, and an online pass-rate filter for RL.

Group-relative advantages (GRPO and kin) are zero when every attempt of a task gets the same
reward, so tasks the policy always or never solves cost rollouts and teach nothing. The pass-rate
filter skips them, re-admitting a few now and then since the policy keeps changing.
"""

from __future__ import annotations

import fnmatch
import random
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from legorl.tasks.model import Task


def select_tasks(
    tasks: Sequence[Task],
    *,
    ids: Iterable[str] | None = None,
    id_glob: str | None = None,
    tags: Iterable[str] | None = None,
    exclude_tags: Iterable[str] | None = None,
    difficulty: Iterable[str] | None = None,
) -> list[Task]:
    """Tasks matching every given criterion (tags: any of them, from [metadata].tags)."""
    want_ids = set(ids) if ids is not None else None
    want_tags, bad_tags = set(tags or ()), set(exclude_tags or ())
    levels = set(difficulty) if difficulty is not None else None
    out = []
    for t in tasks:
        task_tags = set(t.metadata.get("tags") or ())
        if want_ids is not None and t.id not in want_ids:
            continue
        if id_glob is not None and not fnmatch.fnmatchcase(t.id, id_glob):
            continue
        if want_tags and not want_tags & task_tags:
            continue
        if bad_tags & task_tags:
            continue
        if levels is not None and t.metadata.get("difficulty") not in levels:
            continue
        out.append(t)
    return out


class PassRateFilter:
    """Keeps tasks whose recent mean reward lies strictly between `low` and `high`.

    A task with fewer than `min_attempts` recorded rewards is always kept (not yet measured).
    A filtered-out task is still kept with probability `revisit` per call, so its rate is
    re-measured as the policy improves. State is plain data for checkpoints.
    """

    def __init__(self, window: int = 16, min_attempts: int = 4, low: float = 0.0, high: float = 1.0,
                 revisit: float = 0.05, seed: int = 0):
        if not 0 < min_attempts <= window:
            raise ValueError("need 0 < min_attempts <= window")
        self.window, self.min_attempts, self.low, self.high, self.revisit = window, min_attempts, low, high, revisit
        self._rewards: dict[str, deque[float]] = {}
        self._rng = random.Random(seed)

    def record(self, task_id: str, rewards: Iterable[float]) -> None:
        hist = self._rewards.setdefault(task_id, deque(maxlen=self.window))
        hist.extend(float(r) for r in rewards)

    def mean_reward(self, task_id: str) -> float | None:
        hist = self._rewards.get(task_id)
        return sum(hist) / len(hist) if hist else None

    def attempts(self, task_id: str) -> int:
        return len(self._rewards.get(task_id, ()))

    def informative(self, task_id: str) -> bool:
        """True while unmeasured, or when recent rewards are mixed."""
        if self.attempts(task_id) < self.min_attempts:
            return True
        mean = self.mean_reward(task_id)
        assert mean is not None
        return self.low < mean < self.high

    def filter(self, tasks: Sequence[Task]) -> list[Task]:
        return [t for t in tasks if self.informative(t.id) or self._rng.random() < self.revisit]

    def summary(self) -> dict[str, int]:
        """Counts for metrics: measured tasks split into too easy / too hard / informative."""
        counts = {"measured": 0, "too_easy": 0, "too_hard": 0, "informative": 0}
        for task_id in self._rewards:
            if self.attempts(task_id) < self.min_attempts:
                continue
            counts["measured"] += 1
            mean = self.mean_reward(task_id)
            assert mean is not None
            key = "too_easy" if mean >= self.high else "too_hard" if mean <= self.low else "informative"
            counts[key] += 1
        return counts

    def state_dict(self) -> dict[str, Any]:
        return {"rewards": {k: list(v) for k, v in self._rewards.items()}, "rng": self._rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rewards = {k: deque(v, maxlen=self.window) for k, v in state["rewards"].items()}
        rng = state["rng"]
        self._rng.setstate((rng[0], tuple(rng[1]), rng[2]))
