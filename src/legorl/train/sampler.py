"""Deterministic task sampling with a resumable position: epoch-seeded shuffles, no task twice in
an epoch, and a state_dict that a checkpoint stores.

With `pass_rate=True` (`tasks.sampling = "pass_rate"`) the sampler also remembers each task's last
`window` rewards (`observe`, fed the step's trial results): a task whose remembered rewards are all
equal (always solved or never solved: every GRPO group of it has zero advantage) is dead, and a draw
that lands on it is kept only with probability `dead_weight`, by a coin seeded by the draw's position,
so a run and its resumed copy draw the same tasks. Dynamic sampling (DAPO) drops such groups after
paying for their rollouts; this skips most of them before.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _task_key(item: Any) -> str:
    return str(getattr(item, "id", item))


class TaskSampler(Generic[T]):
    def __init__(self, items: list[T], seed: int = 0, *, pass_rate: bool = False, window: int = 8,
                 dead_weight: float = 0.1, key: Callable[[T], str] = _task_key):
        if not items:
            raise ValueError("no training tasks")
        if window < 1 or not 0.0 <= dead_weight <= 1.0:
            raise ValueError("need window >= 1 and 0 <= dead_weight <= 1")
        self.items = items
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self.pass_rate, self.window, self.dead_weight, self.key = pass_rate, window, dead_weight, key
        self.history: dict[str, list[float]] = {}  # task key -> its last `window` rewards
        self.skipped = 0  # dead draws passed over since the last observe()
        self._order = self._shuffle()

    @classmethod
    def for_run(cls, items: list[T], cfg: Any) -> TaskSampler[T]:
        """The sampler a run's config asks for (`tasks.sampling`, seeded by `run.seed`)."""
        t = cfg.tasks
        return cls(items, seed=cfg.run.seed, pass_rate=t.sampling == "pass_rate", window=t.pass_rate_window,
                   dead_weight=t.dead_task_weight)

    def _shuffle(self) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def dead(self, item: T) -> bool:
        """Whether `item`'s last `window` rewards are all equal (no group-relative signal)."""
        hist = self.history.get(self.key(item))
        return hist is not None and len(hist) >= self.window and len(set(hist)) == 1

    def _keep(self, item: T) -> bool:
        if not self.dead(item):
            return True
        return random.Random(f"{self.seed}:{self.epoch}:{self.index}").random() < self.dead_weight

    def next_batch(self, n: int) -> list[T]:
        out: list[T] = []
        # every task dead (or skipping off): draw as the plain shuffle does, or the loop would never end
        skip = self.pass_rate and not all(self.dead(t) for t in self.items)
        while len(out) < n:
            if self.index >= len(self._order):
                self.epoch += 1
                self.index = 0
                self._order = self._shuffle()
            item = self.items[self._order[self.index]]
            if not skip or self._keep(item):
                out.append(item)
            else:
                self.skipped += 1
            self.index += 1
        return out

    def observe(self, results: Sequence[Any]) -> dict[str, float]:
        """Record a step's trial results (`task_id`, `group_id`, `reward`; None rewards are ignored); returns
        `grpo/mixed_group_share` (groups whose rewards differ, of the step's groups) and, with `pass_rate`,
        `sampler/dead_tasks` and `sampler/skipped` (dead draws passed over for this step)."""
        groups: dict[str, list[float]] = defaultdict(list)
        owner: dict[str, str] = {}
        for r in results:
            if r.reward is None:
                continue
            groups[r.group_id].append(float(r.reward))
            owner[r.group_id] = r.task_id
        for gid, rewards in groups.items():
            hist = self.history.setdefault(owner[gid], [])
            hist.extend(rewards)
            del hist[:-self.window]
        mixed = sum(len(rs) > 1 and len(set(rs)) > 1 for rs in groups.values())
        metrics = {"grpo/mixed_group_share": mixed / len(groups) if groups else 0.0}
        if self.pass_rate:
            metrics["sampler/dead_tasks"] = float(sum(self.dead(t) for t in self.items))
            metrics["sampler/skipped"] = float(self.skipped)
            self.skipped = 0
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                "history": {k: list(v) for k, v in self.history.items()}, "skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.index = state["index"]
        self.history = {k: [float(x) for x in v] for k, v in state.get("history", {}).items()}
        self.skipped = int(state.get("skipped", 0))
        self._order = self._shuffle()
