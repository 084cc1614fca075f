"""Learning-rate schedules shared by the RL trainer (`trainer.lr_scheduler`) and the warm start
(`warm_start.lr_scheduler`): a multiplier of the peak rate per optimizer step, for `LambdaLR`."""

from __future__ import annotations

import math
from collections.abc import Callable


def lr_lambda(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """Step i's multiplier: a linear rise over `warmup` steps, then 1 (`constant`) or a `linear` / `cosine`
    decay that reaches 0 at step `total`."""

    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f
