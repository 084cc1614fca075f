"""The trainer's algorithms as a user turns them on: `legorl train CONFIG key=value ...` on the tiny models.

tests/train/test_trainer_step.py and test_corrections.py check each estimator, loss and correction on a
hand-built trainer; here the run builds its own (`train/build.py`): the GAE critic, RLOO + GSPO with
sequence-level IS and geometric rejection, R3 routing replay on an MoE model, and a bf16 trainer on CPU, one step
each (the GAE run also writes its metrics to tensorboard, `run.metrics_sinks`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CASES = {
    # the random model scores 0 and the critic's head starts at 0: the overlong penalty (every reply runs to the
    # 8-token cap) gives the critic returns to fit
    "gae": ["algorithm.adv_estimator=gae", "trainer.critic_lr=1e-3", "algorithm.overlong_buffer=4",
            'run.metrics_sinks=["tensorboard"]'],
    "rloo-gspo-geometric": ["algorithm.adv_estimator=rloo", "algorithm.policy_loss_mode=gspo",
                            "algorithm.clip_ratio_low=3e-4", "algorithm.clip_ratio_high=4e-4",
                            "algorithm.rollout_is=sequence", "algorithm.rollout_rs=geometric"],
    "moe-r3": [],
    "bf16": ["trainer.dtype=bfloat16", "trainer.max_logprob_abs_diff=0.5"],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_legorl_train_runs_the_configured_algorithm(case, tmp_path, tiny_run_config, tiny_moe_dir):
    model = {"path": str(tiny_moe_dir)} if case == "moe-r3" else {}
    cfg = tiny_run_config("a", model=model, trainer={"train_batch_size": 2, "total_steps": 1,
                                                      "max_logprob_abs_diff": 1e-3})
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), *CASES[case], "--no-progress"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (row,) = [json.loads(x) for x in (tmp_path / "runs" / "a" / "logs" / "a.jsonl").read_text().splitlines()]
    assert row["weight_version"] == 1.0
    if case != "bf16":
        assert row["rollout_corr/abs_diff_mean"] <= 1e-5
    assert row["actor/grad_norm"] > 0
    if case == "gae":  # the critic the run built trained beside the actor
        assert row["critic/vf_loss"] > 0 and row["critic/grad_norm"] > 0
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        ea = EventAccumulator(str(tmp_path / "runs" / "a" / "logs" / "tensorboard"))
        ea.Reload()  # the step's metrics and the run's config, as `run.metrics_sinks` promises
        assert [e.step for e in ea.Scalars("critic/vf_loss")] == [1]
        assert any(t.startswith("config") for t in ea.Tags()["tensors"])
    elif case == "rloo-gspo-geometric":  # nothing is off-policy in a sync step: every rollout is kept
        assert row["rollout_rs/rejected_frac"] == 0.0 and row["rollout_is/ess"] > 0.99
    elif case == "moe-r3":  # an MoE model turns R3 on by itself: every routed token replays the engine's choice
        assert row["r3/routing_coverage"] == 1.0
    else:  # bf16 weights score the fp32 engine's tokens a little differently, and the run says by how much
        assert 0 < row["rollout_corr/abs_diff_mean"] < 0.5
