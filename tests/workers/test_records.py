"""Pure-data parts of the worker: trial tokens from a session record, the trajectory filter, pass@k, the band."""

from __future__ import annotations

import numpy as np
import pytest

from legorl.proxy.record import BranchRecord, Counters, SessionRecord
from legorl.tasks.model import Task
from legorl.workers import TokensError, TrajectoryFilter, TrialResult, TrialSpec, trial_tokens
from legorl.workers.cli import parse_band
from legorl.workers.evaluation import EvalReport, pass_at_k

TASK = Task(id="t1", path=__import__("pathlib").Path("/nonexistent"), instruction="x")


def record(mask, lps, versions=None, routed=None) -> SessionRecord:
    n = len(mask)
    b = BranchRecord(0, "main", list(range(10, 10 + n)), mask, lps, versions or [-1] * n, routed, [], [])
    return SessionRecord("s", "m", [b], Counters())


def test_rollout_from_record_maps_context_tokens_to_zero():
    routed = np.arange(5 * 2 * 1).reshape(5, 2, 1)
    rec = record([0, 0, 1, 1, 0], [None, -0.3, -0.1, -0.2, -0.9], [-1, 4, 4, 4, 4], routed)
    ro = trial_tokens(rec)
    assert ro.token_ids == [10, 11, 12, 13, 14] and ro.response_mask == [0, 0, 1, 1, 0]
    # a recomputed context logprob (-0.3, -0.9) is not a behaviour logprob: 0.0 off-mask
    assert ro.logprobs == [0.0, 0.0, -0.1, -0.2, 0.0] and ro.weight_versions == [-1, -1, 4, 4, -1]
    assert ro.routed_experts.shape == (4, 2, 1) and ro.capture["session_id"] == "s"
    assert trial_tokens(record([], [])) is None and trial_tokens(None) is None
    assert TrialResult(TrialSpec(TASK, attempt=1), "failed", "", 0.0, ro).group_id == "t1"  # the task's, by default


def test_policy_token_without_logprob_is_refused():
    with pytest.raises(TokensError, match="1 policy token"):
        trial_tokens(record([0, 1, 1], [None, -0.1, None]))


def _result(outcome, reward, with_rollout=True) -> TrialResult:
    ro = trial_tokens(record([0, 1], [None, -0.5])) if with_rollout else None
    return TrialResult(TrialSpec(TASK), outcome, f"why {outcome}", reward, ro)


def test_filter_drops_infra_outcomes_and_counts_reasons():
    results = [_result("solved", 1.0), _result("failed", 0.0), _result("timeout", 0.0),
               _result("env_setup_failed", None, False), _result("verifier_error", None),
               _result("agent_error", 0.0, False)]
    kept, stats = TrajectoryFilter()(results)
    assert len(kept) == 3 and stats.kept == 3
    assert dict(stats.dropped) == {"env_setup_failed": 1, "verifier_error": 1, "no_rollout": 1}
    assert stats.reasons["verifier_error: why verifier_error"] == 1
    assert stats.metrics()["filter/dropped"] == 3.0
    # a trial the verifier scored is never dropped for its outcome: the timeout's 0 is the policy's
    kept, stats = TrajectoryFilter(drop_outcomes=["timeout", "verifier_error"])(results)
    assert len(kept) == 3 and "timeout" not in stats.dropped and stats.dropped["verifier_error"] == 1
    unscored_timeout = _result("timeout", None)
    assert TrajectoryFilter(drop_outcomes=["timeout"]).keep(unscored_timeout) == "timeout"


def test_pass_at_k_and_report():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3) / C(5,3)
    rep = EvalReport.from_results([_result("solved", 1.0), _result("failed", 0.0)], k=2)
    assert rep.mean_pass(1) == 0.5 and rep.mean_pass(2) == 1.0 and rep.to_json()["num_trials"] == 2


def test_parse_band():
    assert parse_band("1..N-1", 8) == (1, 7) and parse_band("0..N", 4) == (0, 4) and parse_band("2..3", 4) == (2, 3)
    for bad in ("1-3", "3..1", "1..N+1", "a..b"):
        with pytest.raises(ValueError):
            parse_band(bad, 4)
