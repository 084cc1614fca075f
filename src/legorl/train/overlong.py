"""DAPO's soft overlong punishment over multi-turn trials (`algorithm.overlong_buffer`).

A model call stops at `rollout.max_response_len` tokens whether or not the reply was done. The text protocol
still runs a block cut there, so a policy can learn to fill every turn to the cap (a run of guesses, one of which
passes): the reward never says that the cut cost anything, and each step's rollouts and update grow with it. As
in DAPO (Yu et al., 2025), a reply that reaches into the last `overlong_buffer` tokens before the cap loses
reward linearly, up to `overlong_penalty` at the cap. A trial's turns are the runs of its policy tokens (each
model call's sampled tokens, its end-of-turn token included); its longest turn sets the penalty.

Only the training signal is shaped: pass rates, the task sampler and validation keep the verifier's reward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from legorl.trial import TrialResult


def longest_turn(response_mask: Sequence[int]) -> int:
    """The longest run of policy tokens: the most tokens one model call sampled."""
    best = run = 0
    for m in response_mask:
        run = run + 1 if m else 0
        best = max(best, run)
    return best


def overlong_penalty(turn_len: int, max_len: int, buffer: int, factor: float) -> float:
    """0 while `turn_len` <= max_len - buffer, then falling linearly to -factor at max_len (and -factor beyond it)."""
    if buffer <= 0:
        return 0.0
    exceed = turn_len - (max_len - buffer)
    return -factor * min(max(exceed, 0) / buffer, 1.0)


def shape_overlong(trials: list[TrialResult], max_len: int, buffer: int,
                   factor: float) -> tuple[list[TrialResult], dict[str, float]]:
    """`trials` with the penalty added to each reward (new objects; the inputs are left as they are) and the
    step's `overlong/*` metrics. A trial without tokens or reward is passed through."""
    shaped: list[TrialResult] = []
    penalties: list[float] = []
    for r in trials:
        if buffer <= 0 or r.tokens is None or r.reward is None:
            shaped.append(r)
            continue
        p = overlong_penalty(longest_turn(r.tokens.response_mask), max_len, buffer, factor)
        penalties.append(p)
        shaped.append(dataclasses.replace(r, reward=r.reward + p) if p else r)
    n = max(len(penalties), 1)
    metrics = {"overlong/penalized_share": sum(1 for p in penalties if p < 0) / n,
               "overlong/penalty_mean": sum(penalties) / n} if buffer > 0 else {}
    return shaped, metrics
