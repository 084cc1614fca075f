"""What the training loop needs of a trainer, whether it runs in this process (`StepTrainer`) or as
N torch.distributed ranks in child processes (`TrainerRanks`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from legorl.train.batch import TrainBatch


class Trainer(Protocol):
    pad_id: int

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """One update on a collated batch; the step's trainer metrics."""
        ...

    def stream_weights(self, emit: Callable[[dict[str, torch.Tensor]], None]) -> int:
        """The full policy weights to `emit` in buckets; returns the bytes emitted."""
        ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...

    def close(self) -> None: ...
