"""Deterministic task sampling with a resumable position: epoch-seeded shuffles, no task twice in
an epoch, and a state_dict that a checkpoint stores."""

from __future__ import annotations

import random
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class TaskSampler(Generic[T]):
    def __init__(self, items: list[T], seed: int = 0):
        if not items:
            raise ValueError("no training tasks")
        self.items = items
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._shuffle()

    def _shuffle(self) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def next_batch(self, n: int) -> list[T]:
        out = []
        while len(out) < n:
            if self.index >= len(self._order):
                self.epoch += 1
                self.index = 0
                self._order = self._shuffle()
            out.append(self.items[self._order[self.index]])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.index = state["index"]
        self._order = self._shuffle()
