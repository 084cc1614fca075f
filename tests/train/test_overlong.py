"""DAPO's soft overlong punishment (`algorithm.overlong_buffer`, train/overlong.py): the penalty's shape, which
turn sets it, what it leaves alone, and how it meets `filter_groups`. `legorl train` with it on:
tests/train/test_loop_cli.py."""

from __future__ import annotations

import pytest
import torch
from _rollout_helpers import trial

from legorl.config import ConfigError, load_config
from legorl.train.advantages import mixed_group_rows
from legorl.train.overlong import longest_turn, overlong_penalty, shape_overlong
from legorl.train.steps import training_trials


def turns(*lengths: int, context: int = 3) -> tuple[list[int], list[int]]:
    """Token ids and a response mask of a trial whose model calls sampled `lengths` tokens, `context` tokens
    (prompt, tool output) before each."""
    mask: list[int] = []
    for n in lengths:
        mask += [0] * context + [1] * n
    return list(range(len(mask))), mask


def make(tid: str, lengths: tuple[int, ...], reward: float | None, group: str = "g"):
    ids, mask = turns(*lengths)
    r = trial(tid, "t", ids, mask, [0.0] * len(ids), reward=reward or 0.0, group_id=group)
    if reward is None:
        r.reward = None
    return r


def test_longest_turn_is_the_longest_run_of_policy_tokens():
    assert longest_turn(turns(5, 12, 7)[1]) == 12
    assert longest_turn([0, 0, 0]) == 0
    assert longest_turn([1, 1, 0, 1]) == 2


@pytest.mark.parametrize(("length", "expected"), [(0, 0.0), (40, 0.0), (48, 0.0), (52, -0.25), (56, -0.5),
                                                  (64, -1.0), (70, -1.0)])
def test_penalty_is_zero_before_the_buffer_and_linear_to_the_cap(length, expected):
    assert overlong_penalty(length, max_len=64, buffer=16, factor=1.0) == pytest.approx(expected)


def test_penalty_scales_with_the_factor_and_is_off_without_a_buffer():
    assert overlong_penalty(64, max_len=64, buffer=16, factor=0.5) == pytest.approx(-0.5)
    assert overlong_penalty(64, max_len=64, buffer=0, factor=1.0) == 0.0


def test_the_longest_turn_sets_a_trials_penalty_and_inputs_are_left_alone():
    short, capped, once, failed = (make("a", (10, 12), 1.0), make("b", (64, 10), 1.0), make("c", (10, 56), 0.0),
                                   make("d", (5,), None))
    shaped, m = shape_overlong([short, capped, once, failed], max_len=64, buffer=16, factor=1.0)
    assert [r.reward for r in shaped] == [1.0, 0.0, -0.5, None]
    assert shaped[0] is short and shaped[3] is failed  # nothing to change: the same objects
    assert (capped.reward, once.reward) == (1.0, 0.0)  # the verifier's rewards stay on the originals
    assert m["overlong/penalized_share"] == pytest.approx(2 / 3) and m["overlong/penalty_mean"] == pytest.approx(-0.5)


def test_off_by_default_from_the_config():
    cfg = load_config(None, [])
    trials = [make("a", (8,), 1.0)]
    shaped, m = training_trials(cfg, trials)
    assert shaped == trials and m == {}


def test_a_group_that_only_differs_in_length_carries_signal_under_filter_groups():
    """All four trials pass, one by filling its turn to the cap: after shaping the group is mixed, so
    `filter_groups` keeps it and the capped trial gets the negative advantage."""
    cfg = load_config(None, ["rollout.max_response_len=32", "algorithm.overlong_buffer=8",
                             "algorithm.filter_groups=true"])
    trials = [make(str(i), (n,), 1.0) for i, n in enumerate((9, 11, 32, 10))]
    plain = torch.tensor([r.reward for r in trials])
    assert mixed_group_rows(plain, ["g"] * 4) == []
    shaped, _ = training_trials(cfg, trials)
    assert mixed_group_rows(torch.tensor([r.reward for r in shaped]), ["g"] * 4) == [0, 1, 2, 3]
    assert [r.reward for r in shaped] == [1.0, 1.0, 0.0, 1.0]


def test_a_buffer_as_long_as_the_cap_is_refused():
    with pytest.raises(ConfigError, match=r"overlong_buffer=48 must be below rollout\.max_response_len=48"):
        load_config(None, ["rollout.max_response_len=48", "algorithm.overlong_buffer=48"])
