"""Each failure signature fires on a crafted run built to show it, and a healthy run is clean."""

from __future__ import annotations

import json

from legorl.ops.doctor import diagnose
from legorl.ops.runs import Run

from .rundir import base_record, make_run, trial


def sigs(run_dir) -> list[str]:
    return [f.signature for f in diagnose(Run(run_dir))]


def recs(n: int, **over) -> list[dict]:
    return [{"step": s, **base_record(s), **over} for s in range(1, n + 1)]


def test_healthy_run_is_clean(tmp_path):
    assert sigs(make_run(tmp_path, steps=4)) == []


def test_zero_tool_calls(tmp_path):
    trials = [trial(1, f"step_1-000-{j}", "t", tool_calls=0, parse_failures=2, commands=0) for j in range(4)]
    run = make_run(tmp_path, trials=trials, config={"agent": {"tool_parser": "qwen3_coder"}})
    found = diagnose(Run(run))
    assert [f.signature for f in found] == ["zero tool calls"] and "qwen3_coder" in found[0].fix
    # a text-protocol scaffold never makes tool calls: not a finding
    run2 = make_run(tmp_path, "text", trials=trials, config={"agent": {"kwargs": {"tools": False}}})
    assert sigs(run2) == []


def test_zero_tool_calls_in_an_older_run_dir(tmp_path):
    """A config.json written before the config split has flat rollout keys: read under the new names."""
    trials = [trial(1, f"step_1-000-{j}", "t", tool_calls=0, parse_failures=2, commands=0) for j in range(4)]
    old = {"run": {"name": "exp"}, "rollout": {"tool_parser": "qwen3_coder", "train_mode": "sync"}}
    run = make_run(tmp_path, trials=trials)
    (run / "config.json").write_text(json.dumps(old))
    found = diagnose(Run(run))
    assert [f.signature for f in found] == ["zero tool calls"] and "qwen3_coder" in found[0].fix
    assert "agent.tool_parser" in found[0].fix
    (run / "config.json").write_text(json.dumps({**old, "rollout": {"agent_kwargs": {"tools": False}}}))
    assert sigs(run) == []


def test_zero_rewards_with_verifier_errors(tmp_path):
    trials = [trial(1, "step_1-000-0", "t", "verifier_error", None, reason="verifier crashed: no pytest"),
              trial(1, "step_1-000-1", "t", "failed", 0.0)]
    assert sigs(make_run(tmp_path, trials=trials)) == ["all-zero rewards with verifier errors"]


def test_verifier_errors_share(tmp_path):
    """1 of 4 trials unjudged is over the 0.2 default: named with its reason; a looser config stays quiet."""
    trials = [trial(1, "step_1-000-0", "t", "verifier_error", None,
                    reason="verifier could not run: /tests/test.sh: line 2: jq: command not found"),
              trial(1, "step_1-000-1", "t", "solved", 1.0), trial(1, "step_1-001-0", "u", "failed", 0.0),
              trial(1, "step_1-001-1", "u", "failed", 0.0)]
    found = diagnose(Run(make_run(tmp_path, trials=trials)))
    assert [f.signature for f in found] == ["verifier errors drop trials from training"]
    assert "1/4" in found[0].evidence and "jq: command not found" in found[0].evidence
    quiet = make_run(tmp_path, "loose", trials=trials, config={"rollout": {"verifier_error_warn_share": 0.5}})
    assert sigs(quiet) == []


def test_all_env_setup_failed(tmp_path):
    trials = [trial(2, f"step_2-00{i}-0", "t", "env_setup_failed", None, reason="bwrap: setting up uid map")
              for i in range(3)]
    assert sigs(make_run(tmp_path, trials=trials)) == ["every trial env_setup_failed"]


def test_logprob_collapse(tmp_path):
    records = recs(3)
    records[2].update({"rollout_corr/abs_diff_mean": 0.4, "rollout_corr/pearson": 0.5})
    assert sigs(make_run(tmp_path, records=records)) == ["rollout/trainer logprob agreement collapse"]


def test_ess_collapse(tmp_path):
    assert sigs(make_run(tmp_path, records=recs(3, **{"rollout_is/ess": 0.05}))) == ["importance-sampling ESS collapse"]


def test_staleness_drops(tmp_path):
    records = recs(2, **{"trajectory_filter/dropped_stale": 12.0, "trajectory_filter/kept": 4.0})
    assert sigs(make_run(tmp_path, records=records)) == ["staleness drops dominate"]


def test_sandbox_latency_creep(tmp_path):
    trials = [trial(s, f"step_{s}-000-{j}", "t", sandbox_start=0.5 * s * s) for s in range(1, 9) for j in range(2)]
    assert sigs(make_run(tmp_path, trials=trials)) == ["sandbox start latency creeping up"]


def test_zero_std_groups(tmp_path):
    records = recs(5, **{"grpo/zero_std_groups": 4, "grpo/num_groups": 4, "critic/score/mean": 0.0})
    found = diagnose(Run(make_run(tmp_path, records=records)))
    assert [f.signature for f in found] == ["zero-std groups dominate"] and "too hard" in found[0].fix


def test_timeouts_dominate(tmp_path):
    trials = [trial(1, f"step_1-000-{j}", "t", "timeout", 0.0, reason="agent ran past its 120s timeout")
              for j in range(3)] + [trial(1, "step_1-001-0", "u")]
    found = diagnose(Run(make_run(tmp_path, trials=trials)))
    assert [f.signature for f in found] == ["timeout dominates"] and "agent.timeout_sec" in found[0].fix


def test_length_capped_calls(tmp_path):
    """The main demo's failure before overlong shaping: by its last steps nearly every call ran to the 48-token cap
    (a block of guesses, cut and still run). Two steps are not enough evidence; the fix names the buffer, or the
    penalty once the buffer is on."""
    capped = [{"step": s, **base_record(s), "rollout/turns/length_capped_share": v}
              for s, v in enumerate((0.1, 0.3, 0.6, 0.8, 0.9), start=1)]
    found = diagnose(Run(make_run(tmp_path, records=capped, config={"rollout": {"max_response_len": 48}})))
    assert [f.signature for f in found] == ["model calls cut at the length cap"]
    assert "77% of model calls" in found[0].evidence and "max_response_len=48" in found[0].evidence
    assert "algorithm.overlong_buffer (e.g. a third of 48)" in found[0].fix
    shaped = make_run(tmp_path, "shaped", records=capped, config={"rollout": {"max_response_len": 48},
                                                                   "algorithm": {"overlong_buffer": 16}})
    assert "overlong_penalty" in diagnose(Run(shaped))[0].fix
    assert sigs(make_run(tmp_path, "early", records=capped[3:])) == []


def test_kv_preemptions(tmp_path):
    """A KV pool too small for the step's live trials: calls are evicted and recompute their contexts. 2 in 24
    trials preempted is below the bar; a signature needs three steps; the evidence names the pool and the
    concurrency, and the fix the three ways out."""
    counts = (0, 1, 4, 3, 5)
    records = [{"step": s, **base_record(s), "budget/engine/preemptions": float(v)}
               for s, v in enumerate(counts, start=1)]
    cfg = {"serving": {"kv_budget_tokens": 4096}, "rollout": {"concurrency": 8}}
    found = diagnose(Run(make_run(tmp_path, records=records, config=cfg)))
    assert [f.signature for f in found] == ["KV pool preempts model calls"]
    assert "steps 3..5: 12 calls evicted" in found[0].evidence and "over 24 trials" in found[0].evidence
    assert "kv_budget_tokens=4096" in found[0].evidence and "concurrency=8" in found[0].evidence
    for key in ("serving.kv_budget_tokens", "rollout.concurrency", "serving.scheduler"):
        assert key in found[0].fix
    few = [{**r, "budget/engine/preemptions": v} for r, v in zip(records[2:], (1.0, 0.0, 1.0), strict=True)]
    assert sigs(make_run(tmp_path, "few", records=few)) == []  # 2 in 24 trials: below the bar
    assert sigs(make_run(tmp_path, "short", records=records[3:])) == []  # two steps
