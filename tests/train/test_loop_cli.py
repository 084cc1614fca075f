"""`legorl train` end to end on the tiny model: a full sync step, kill -9 + --resume, bad configs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch


def legorl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def write_cfg(tiny_run_config, steps: int) -> Path:
    return tiny_run_config("t", trainer={"train_batch_size": 2, "total_steps": steps, "save_freq": 1,
                                         "max_logprob_abs_diff": 1e-3})


def steps_logged(tmp_path: Path) -> list[int]:
    path = tmp_path / "runs" / "t" / "logs" / "t.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_one_sync_step_changes_weights_and_engine_serves_them(tiny_llama_dir, tmp_path, tiny_run_config):
    import asyncio

    # two tasks, one whose test.sh calls a tool the sandbox lacks: its trials cannot be judged, leave the
    # update, and the step warns (2 of 4 trials > rollout.verifier_error_warn_share); the other's train
    import shutil

    from legorl.config import load_config
    from legorl.tasks.builtin_sets import builtin_path
    from legorl.train.loop import train

    tasks = tmp_path / "tasks"
    for name in ("append-line", "arithmetic"):
        shutil.copytree(builtin_path("shell-basics") / name, tasks / name)
    (tasks / "arithmetic/tests/test.sh").write_text(
        "#!/bin/bash\nif no-such-grader /app; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    # and two harnesses in one run (agent.mix): the builtin scaffold with tool calls and with its text protocol
    mix = [{"name": "builtin", "label": "tools"}, {"name": "builtin", "label": "text", "kwargs": {"tools": False}}]
    cfg = load_config(tiny_run_config("t", trainer={"train_batch_size": 2, "total_steps": 1, "save_freq": 1,
                                                    "max_logprob_abs_diff": 1e-3}, tasks={"train": str(tasks)},
                                      agent={"mix": mix}))
    lines: list[str] = []
    history = asyncio.run(train(cfg, on_line=lines.append, progress=False))
    assert len(history) == 1 and history[0]["step"] == 1
    m = history[0]
    assert m["rollout/outcome/verifier_error"] == 0.5 and m["trajectory_filter/dropped_verifier_error"] == 2
    [warning] = [line for line in lines if line.startswith("warning:step:1 - 50% ")]
    log = (tmp_path / "runs" / "t" / "logs" / "t.log").read_text()
    assert warning in log and "verifier_error" in warning
    results = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "t" / "trials").rglob("result.json")]
    ran = {(r["group_id"], r["attempt"]): r["metadata"]["harness"] for r in results}
    assert set(ran.values()) == {"tools", "text"}, ran
    assert m["rollout/harness/tools/share"] + m["rollout/harness/text/share"] == 1.0
    assert all(m[f"rollout/harness/{h}/policy_tokens_mean"] > 0 for h in ("tools", "text"))
    assert m["weight_version"] == 1.0  # the engine was updated in place and serves version 1
    assert m["rollout_corr/abs_diff_mean"] <= 1e-5
    assert m["actor/grad_norm"] > 0
    assert 0 < m["perf/rss_gb"] <= m["perf/peak_rss_gb"] < 64  # the process's memory, now and its peak
    assert m["perf/update_kv_gb"] > 0  # the engine kept its KV pool through the update (free_kv_during_update off)
    assert any(line.startswith("step:1 - ") for line in lines)
    ckpt = tmp_path / "runs" / "t" / "checkpoints" / "step_1" / "model.safetensors"
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    trained = load_file(str(ckpt))
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).state_dict()
    assert any(not (trained[k] == base[k]).all() for k in trained)


@pytest.mark.slow
def test_filter_groups_from_the_cli_skips_a_step_without_signal(tiny_llama_dir, tmp_path, tiny_run_config):
    """`algorithm.filter_groups=true` on the command line: the random tiny model scores 0 in every group, so
    no row is trained on and the weights stay the base model's (without the filter, the config's entropy
    term changes them: test above). tests/train/test_trainer_step.py checks the mixed-group case. With
    `serving.free_kv_during_update` the engine keeps its KV pool through a step that updates nothing."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    res = legorl("train", str(write_cfg(tiny_run_config, 1)), "algorithm.filter_groups=true",
                 "serving.free_kv_during_update=true", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads((tmp_path / "runs" / "t" / "logs" / "t.jsonl").read_text().splitlines()[-1])
    assert row["filter_groups/dropped_rows"] == 4 and row["filter_groups/kept_rows"] == 0
    assert row["grpo/zero_std_groups"] == row["grpo/num_groups"] == 2 and row["actor/skipped"] == 1
    assert row["perf/update_kv_gb"] > 0  # no update ran, so the pool was not freed and made again
    trained = load_file(str(tmp_path / "runs" / "t" / "checkpoints" / "step_1" / "model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).state_dict()
    assert all(torch.equal(trained[k], base[k]) for k in trained)


@pytest.mark.slow
def test_overlong_buffer_from_the_cli_shapes_the_updates_reward_only(tmp_path, tiny_run_config):
    """`algorithm.overlong_buffer=4` with 8-token calls: the random tiny model fills its calls (it rarely samples
    an end of turn), so its trials lose up to `overlong_penalty` in the update's reward (`critic/score/mean`), while
    the step's outcomes keep the verifier's 0 (`rollout/score/mean`)."""
    res = legorl("train", str(write_cfg(tiny_run_config, 1)), "algorithm.overlong_buffer=4",
                 "algorithm.overlong_penalty=0.5", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads((tmp_path / "runs" / "t" / "logs" / "t.jsonl").read_text().splitlines()[-1])
    assert row["overlong/penalized_share"] > 0 and -0.5 <= row["overlong/penalty_mean"] < 0
    assert row["rollout/score/mean"] == 0.0
    assert row["critic/score/mean"] == pytest.approx(row["overlong/penalty_mean"])
    bad = legorl("train", str(write_cfg(tiny_run_config, 1)), "algorithm.overlong_buffer=8", "--no-progress")
    assert bad.returncode != 0 and "overlong_buffer=8 must be below rollout.max_response_len=8" in bad.stderr


@pytest.mark.slow
def test_kill_then_resume_continues_without_lost_or_repeated_steps(tmp_path, tiny_run_config):
    cfg = write_cfg(tiny_run_config, 3)
    proc = subprocess.Popen([sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 400
    try:
        # step 1 is logged first, then checkpointed: wait for both (a kill in between re-runs step 1)
        latest = tmp_path / "runs" / "t" / "checkpoints" / "latest"
        while time.time() < deadline and not (1 in steps_logged(tmp_path) and latest.exists()):
            time.sleep(0.2)
        assert 1 in steps_logged(tmp_path) and latest.exists(), "step 1 never finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 3 not in steps_logged(tmp_path)
    res = legorl("train", str(cfg), "--resume", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed from" in res.stdout
    assert steps_logged(tmp_path) == [1, 2, 3]
    again = legorl("train", str(cfg), "--no-progress")
    assert again.returncode == 2 and "--resume" in again.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.lrr=1", "unknown key 'trainer.lrr'"),
        ("trainer.lr=abc", "trainer.lr: Input should be a valid number"),
        ("algorithm.n_resp_per_prompt=1", "group baselines need at least 2 responses"),
        ("~trainer.lr", "~KEY removes a key the config file sets, and 'trainer.lr' is not set there"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path, override, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\nname = 'x'\n")
    res = legorl("train", str(cfg), override)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_tilde_drops_a_key_the_file_sets(tmp_path):
    """`~key` on the command line removes a key the run file set, so the default applies (Hydra's syntax)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\nname = 'x'\n[trainer]\nlr = 0.5\n")
    assert 'lr = 0.5' in legorl("config", str(cfg)).stdout
    res = legorl("config", str(cfg), "~trainer.lr")
    assert res.returncode == 0 and "lr = 0.5" not in res.stdout and "lr = 1e-06" in res.stdout, res.stderr


def test_missing_config_file(tmp_path):
    res = legorl("train", str(tmp_path / "nope.toml"))
    assert res.returncode == 2 and "no such config file" in res.stderr


@pytest.mark.slow
def test_max_checkpoints_to_keep_deletes_older_checkpoints(tmp_path, tiny_run_config):
    """`trainer.max_checkpoints_to_keep` from the run config: after 3 steps saved every step, only the newest
    two checkpoint directories are left and `latest` points at the newest."""
    cfg = tiny_run_config("t", trainer={"train_batch_size": 2, "total_steps": 3, "save_freq": 1,
                                        "max_checkpoints_to_keep": 2})
    res = legorl("train", str(cfg), "--no-progress")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ckpts = tmp_path / "runs" / "t" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step_")) == ["step_2", "step_3"]
    assert (ckpts / "latest").read_text().strip() == "step_3"
