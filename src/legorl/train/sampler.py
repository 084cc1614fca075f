"""Deterministic task sampling with a resumable position: epoch-seeded shuffles, no task twice in
an epoch, and a state_dict that a checkpoint stores.

With `pass_rate=True` (`tasks.sampling = "pass_rate"`) the sampler also remembers each task's last
`window` rewards (`observe`, fed the step's trial results): a task whose remembered rewards are all
equal (always solved or never solved: every GRPO group of it has zero advantage) is dead, and a draw
that lands on it is kept only with probability `dead_weight`, by a coin seeded by the draw's position,
so a run and its resumed copy draw the same tasks. Dynamic sampling (DAPO) drops such groups after
paying for their rollouts; this skips most of them before.

With many tasks each drawn rarely (hundreds of tasks, a few a step) a task is seldom drawn twice, so its
own record never forms. `record_by` (`tasks.sample_by`, a [metadata] key such as `kind`) keeps the
records per value instead: every trial of any task of a kind feeds the kind's record, and a draw of a
task never drawn before is passed over when its kind is dead. A kind is then never starved: besides the
coin, a dead value passed over ceil(1 / dead_weight) - 1 times in a row is kept on its next draw (the
exploration floor), so the record is re-measured as the policy changes.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _task_key(item: Any) -> str:
    return str(getattr(item, "id", item))


class TaskSampler(Generic[T]):
    def __init__(self, items: list[T], seed: int = 0, *, pass_rate: bool = False, window: int = 8,
                 dead_weight: float = 0.1, key: Callable[[T], str] = _task_key,
                 record_by: str | None = None, record_key: Callable[[T], str] | None = None):
        if not items:
            raise ValueError("no training tasks")
        if window < 1 or not 0.0 <= dead_weight <= 1.0:
            raise ValueError("need window >= 1 and 0 <= dead_weight <= 1")
        if (record_by is None) != (record_key is None):
            raise ValueError("record_by (the records' name) and record_key (an item's value) go together")
        if record_by is not None and dead_weight == 0:
            raise ValueError("records per value need dead_weight > 0: a dead value would never be drawn again")
        self.items = items
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self.pass_rate, self.window, self.dead_weight, self.key = pass_rate, window, dead_weight, key
        self.record_by = record_by
        rec = record_key or key
        self._record_of = {key(it): rec(it) for it in items}  # task key -> the key of the record it feeds
        self.history: dict[str, list[float]] = {}  # record key -> its last `window` rewards
        self.skipped = 0  # dead draws passed over since the last observe()
        self.dead_drawn = 0  # dead draws kept (coin or floor) since the last observe()
        self.passed: dict[str, int] = {}  # record_by: a dead value's draws passed over since it was last drawn
        self._floor = math.ceil(1 / dead_weight) if record_by is not None else 0
        self._order = self._shuffle()

    @classmethod
    def for_run(cls, items: list[T], cfg: Any) -> TaskSampler[T]:
        """The sampler a run's config asks for (`tasks.sampling`, seeded by `run.seed`)."""
        t = cfg.tasks
        by = t.sample_by if t.sampling == "pass_rate" else None
        if by is not None and not any(by in getattr(it, "metadata", {}) for it in items):
            raise ValueError(f"tasks.sample_by={by!r}: none of the {len(items)} training tasks has it in [metadata]")
        return cls(items, seed=cfg.run.seed, pass_rate=t.sampling == "pass_rate", window=t.pass_rate_window,
                   dead_weight=t.dead_task_weight, record_by=by,
                   record_key=None if by is None else lambda it: str(it.metadata.get(by)))

    def _shuffle(self) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def record_key(self, item: T) -> str:
        """The record `item` feeds and is judged by: its own, or its `record_by` value's."""
        k = self.key(item)
        return self._record_of.get(k, k)

    def _dead_record(self, rk: str) -> bool:
        hist = self.history.get(rk)
        return hist is not None and len(hist) >= self.window and len(set(hist)) == 1

    def dead(self, item: T) -> bool:
        """Whether `item`'s record's last `window` rewards are all equal (no group-relative signal)."""
        return self._dead_record(self.record_key(item))

    def _keep(self, item: T) -> bool:
        if not self.dead(item):
            return True
        rk = self.record_key(item)
        keep = random.Random(f"{self.seed}:{self.epoch}:{self.index}").random() < self.dead_weight
        if self.record_by is not None:
            keep = keep or self.passed.get(rk, 0) + 1 >= self._floor
            self.passed[rk] = 0 if keep else self.passed.get(rk, 0) + 1
        self.dead_drawn += keep
        return keep

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
            hist = self.history.setdefault(self._record_of.get(owner[gid], owner[gid]), [])
            hist.extend(rewards)
            del hist[:-self.window]
        mixed = sum(len(rs) > 1 and len(set(rs)) > 1 for rs in groups.values())
        metrics = {"grpo/mixed_group_share": mixed / len(groups) if groups else 0.0}
        if self.pass_rate:
            metrics["sampler/dead_tasks"] = float(sum(self.dead(t) for t in self.items))
            metrics["sampler/skipped"] = float(self.skipped)
            if self.record_by is not None:
                values = set(self._record_of.values())
                metrics["sampler/judged_values"] = float(sum(len(self.history.get(v, ())) >= self.window
                                                             for v in values))
                metrics["sampler/dead_values"] = float(sum(self._dead_record(v) for v in values))
                metrics["sampler/dead_drawn"] = float(self.dead_drawn)
            self.skipped = self.dead_drawn = 0
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed,
                "history": {k: list(v) for k, v in self.history.items()}, "skipped": self.skipped,
                "record_by": self.record_by, "passed": dict(self.passed), "dead_drawn": self.dead_drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.index = state["index"]
        self.history = {k: [float(x) for x in v] for k, v in state.get("history", {}).items()}
        self.skipped = int(state.get("skipped", 0))
        self.passed = {k: int(v) for k, v in state.get("passed", {}).items()}
        self.dead_drawn = int(state.get("dead_drawn", 0))
        if state.get("record_by") != self.record_by:  # records of another key judge nothing here: start afresh
            self.history, self.passed = {}, {}
        self._order = self._shuffle()
