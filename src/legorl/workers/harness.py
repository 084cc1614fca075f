"""Several agent harnesses in one run: which one a trial runs.

The system legorl is modelled on trains one policy through several native harnesses at once, so it learns
to act through each harness's tools and prompts. A GRPO group stays per task: its attempts are spread over
the harnesses by weight (attempt k of a group takes the harness at point frac(offset + k * golden ratio) of
the cumulative weights, which fills any group size close to the weights' proportions), and the group's
advantages compare them. The choice is a pure function of the trial spec, so a resumed or re-run step
assigns the same harness to the same attempt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from legorl.trial import TrialSpec

_GOLDEN = 0.6180339887498949


@dataclass(frozen=True)
class Harness:
    name: str  # a registered scaffold or `module:Class`
    kwargs: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    label: str = ""  # how results and metrics name it ("": the name)

    @property
    def key(self) -> str:
        return self.label or self.name


def choose_harness(harnesses: Sequence[Harness], spec: TrialSpec) -> Harness:
    """The harness of `spec`'s trial (the only one when there is one)."""
    if len(harnesses) == 1:
        return harnesses[0]
    if not harnesses:
        raise ValueError("no harness to choose from")
    group = spec.group_id or spec.task.id
    offset = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "big") / 2**64
    u = (offset + spec.attempt * _GOLDEN) % 1.0
    total = sum(h.weight for h in harnesses)
    acc = 0.0
    for h in harnesses:
        acc += h.weight / total
        if u < acc:
            return h
    return harnesses[-1]
