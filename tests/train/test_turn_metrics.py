"""Per-turn step metrics (`turn_metrics`) on hand-built trials: each number checked by hand."""

from __future__ import annotations

import pytest
from _rollout_helpers import trial

from legorl.train.steps import outcome_metrics, rollout_metrics, turn_metrics
from legorl.workers.filter import FilterStats


def _trials():
    # a: solved in 3 turns, 2 native calls + 1 call the proxy could not parse; 4 of 10 tokens policy
    a = trial("a", "t", list(range(10)), [0] * 6 + [1] * 4, [0.0] * 6 + [-0.5] * 4, reward=1.0)
    a.turns, a.metadata["counters"] = 3, {"calls": 3, "tool_calls": 2, "tool_parse_failures": 1, "length_capped": 1}
    # b: solved in 1 turn through the builtin's text protocol (counters only on the tokens' capture)
    b = trial("b", "t", list(range(5)), [0, 0, 0, 1, 1], [0.0, 0.0, 0.0, -1.0, -1.0], reward=1.0)
    b.turns, b.metadata["scaffold_text_actions"] = 1, 1
    b.tokens.capture["counters"] = {"calls": 1, "tool_calls": 0, "tool_parse_failures": 0}
    # c: failed, 2 turns, 1 native call; d: no tokens at all (the scaffold crashed before any call)
    c = trial("c", "u", list(range(5)), [0, 0, 0, 0, 1], [0.0] * 4 + [-2.0], reward=0.0)
    c.turns, c.metadata["counters"] = 2, {"calls": 2, "tool_calls": 1, "tool_parse_failures": 0, "length_capped": 2}
    d = trial("d", "u", [1], [0], [0.0])
    d.tokens, d.turns, d.outcome = None, 0, "agent_error"
    return [a, b, c, d]


def test_turn_metrics_each_number():
    m = turn_metrics(_trials(), "rollout")
    assert m["rollout/turns/mean"] == pytest.approx((3 + 1 + 2 + 0) / 4)
    assert m["rollout/turns/tool_calls_mean"] == pytest.approx((2 + 1 + 1 + 0) / 4)
    assert m["rollout/turns/parse_failures"] == 1.0
    assert m["rollout/turns/parse_failure_rate"] == pytest.approx(1 / (4 + 1))
    assert m["rollout/turns/solved_multi_turn_share"] == pytest.approx(1 / 2)  # a (3 turns) of a, b
    assert m["rollout/turns/response_mask_share"] == pytest.approx((4 + 2 + 1) / (10 + 5 + 5))
    assert m["rollout/turns/length_capped_share"] == pytest.approx((1 + 0 + 2) / (3 + 1 + 2))  # of model calls
    assert set(m) == {f"rollout/turns/{k}" for k in ("mean", "tool_calls_mean", "parse_failures",
                                                       "parse_failure_rate", "solved_multi_turn_share",
                                                       "response_mask_share", "length_capped_share")}


def test_nothing_solved_leaves_the_multi_turn_share_out():
    m = turn_metrics([t for t in _trials() if t.trial_id in ("c", "d")], "val")
    assert "val/turns/solved_multi_turn_share" not in m
    assert m["val/turns/mean"] == 1.0 and m["val/turns/tool_calls_mean"] == 0.5
    assert m["val/turns/parse_failure_rate"] == 0.0 and m["val/turns/response_mask_share"] == pytest.approx(1 / 5)
    empty = turn_metrics([], "val")
    assert empty["val/turns/mean"] == 0.0 and empty["val/turns/response_mask_share"] == 0.0


def test_outcome_and_rollout_metrics_carry_them():
    trials = _trials()
    assert turn_metrics(trials, "val").items() <= outcome_metrics(trials, "val").items()
    assert turn_metrics(trials, "rollout").items() <= rollout_metrics(trials, FilterStats()).items()
