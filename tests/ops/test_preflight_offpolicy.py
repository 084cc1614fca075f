"""Preflight on off-policy settings: async without a correction, and settings that turn clipping off."""

from __future__ import annotations

import pytest

from legorl.config import load_config
from legorl.ops.preflight import check_pitfalls


def warned(keys: list[str]) -> list[str]:
    cfg = load_config(None, ["trainer.max_logprob_abs_diff=1e-3", *keys])
    return [r.message for r in check_pitfalls(cfg) if r.level == "WARN"]


def test_async_without_any_correction_warns_even_at_staleness_zero():
    msgs = warned(["async_training.enabled=true", "algorithm.rollout_is=none"])
    assert len(msgs) == 1 and "no off-policy correction" in msgs[0] and "clipping never binds" in msgs[0]
    msgs = warned(["async_training.enabled=true", "algorithm.rollout_is=none", "trainer.ppo_epochs=2"])
    assert len(msgs) == 1 and "clipping never binds" not in msgs[0]


@pytest.mark.parametrize("keys", [
    [],  # async default: token IS
    ["algorithm.rollout_is=masked"],
    ["algorithm.rollout_is=none", "algorithm.rollout_rs=geometric"],
    ["algorithm.ppo_anchor=behaviour"],
])
def test_any_correction_satisfies_the_async_check(keys):
    assert warned(["async_training.enabled=true", *keys]) == []


@pytest.mark.parametrize("keys, phrase", [
    (["algorithm.clip_ratio_low=1.0"], "lower clip"),
    (["algorithm.clip_ratio_high=5"], "upper clip"),
    (["algorithm.rollout_is=token", "algorithm.rollout_is_threshold=1000"], "not truncated"),
    (["algorithm.rollout_rs=token", "algorithm.rollout_rs_low=0", "algorithm.rollout_rs_high=1000"], "nothing is rejected"),
])
def test_settings_that_silently_turn_clipping_off_warn(keys, phrase):
    msgs = warned(keys)
    assert len(msgs) == 1 and phrase in msgs[0]


def test_sync_defaults_do_not_warn():
    assert warned([]) == []
