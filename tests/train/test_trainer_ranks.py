"""`legorl train --nproc 2` (trainer.n_ranks = 2): two FSDP2 ranks on gloo in child processes of the run,
the same weights as one process after 2 steps, sharded checkpoints that `--resume` continues after a
kill -9 and that `legorl export` turns into a plain HF model directory."""

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

from legorl.train.checkpoint import read_weights


def legorl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def write_cfg(tiny_run_config, name: str, steps: int) -> Path:
    # one trial at a time: the engine draws samples in arrival order, so concurrent trials may swap outputs
    # between runs, and the two runs must train on the same batches
    return tiny_run_config(name, trainer={"train_batch_size": 2, "total_steps": steps, "save_freq": 1,
                                          "max_logprob_abs_diff": 1e-3},
                           rollout={"max_turns": 1, "max_response_len": 8, "concurrency": 1})


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for part in read_weights(run / "checkpoints" / f"step_{step}"):
        out.update(part)
    return out


def steps_logged(run: Path) -> list[int]:
    path = run / "logs" / f"{run.name}.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []



@pytest.mark.slow
def test_two_ranks_train_like_one_process_and_export(tmp_path, tiny_run_config, tiny_llama_dir):
    runs = tmp_path / "runs"
    one = legorl("train", str(write_cfg(tiny_run_config, "one", 2)), "--no-progress")
    assert one.returncode == 0, one.stderr[-3000:]
    two = legorl("train", str(write_cfg(tiny_run_config, "two", 2)), "--no-progress", "--nproc", "2")
    assert two.returncode == 0, two.stderr[-3000:]
    ckpt = runs / "two" / "checkpoints" / "step_2"
    assert (ckpt / "model.safetensors.index.json").is_file() and (ckpt / "dcp").is_dir()
    w1, w2 = weights(runs / "one", 2), weights(runs / "two", 2)
    base = weights(runs / "one", 1)
    assert w1.keys() == w2.keys()
    assert any(not torch.equal(w1[k], base[k]) for k in w1)  # the second step moved the weights
    worst = max(float((w2[k] - w1[k]).norm() / w1[k].norm().clamp(min=1e-12)) for k in w1)
    assert worst < 1e-5, worst
    m = [json.loads(line) for line in (runs / "two" / "logs" / "two.jsonl").read_text().splitlines()]
    assert m[-1]["weight_version"] == 2.0 and m[-1]["weight_sync/bytes"] > 0
    assert m[-1]["rollout_corr/abs_diff_mean"] <= 1e-5  # the engine serves exactly what the ranks trained
    out = tmp_path / "exported"
    exp = legorl("export", str(ckpt), str(out), "--model", str(tiny_llama_dir))
    assert exp.returncode == 0, exp.stderr[-2000:]
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert all(torch.equal(exported[k], w2[k]) for k in w2 if k in exported)


@pytest.mark.slow
def test_two_ranks_kill_then_resume(tmp_path, tiny_run_config):
    run = tmp_path / "runs" / "t"
    cfg = write_cfg(tiny_run_config, "t", 3)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress", "--nproc", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.time() + 600
    try:
        latest = run / "checkpoints" / "latest"
        while time.time() < deadline and not (1 in steps_logged(run) and latest.exists()):
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            time.sleep(0.2)
        assert 1 in steps_logged(run) and latest.exists(), "step 1 never finished"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 3 not in steps_logged(run)
    res = legorl("train", str(cfg), "--resume", "--no-progress", "--nproc", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout
    assert steps_logged(run) == [1, 2, 3]
    # a sharded checkpoint needs the same number of ranks: one line saying so, exit 2
    wrong = legorl("train", str(cfg), "--resume", "--no-progress", "trainer.total_steps=4")
    assert wrong.returncode == 2 and "n_ranks" in wrong.stderr, wrong.stderr[-2000:]


@pytest.mark.slow
def test_two_ranks_take_mini_batch_steps_like_one_process(tmp_path, tiny_run_config):
    """`trainer.ppo_mini_batch_size=1`: each of the step's 2 groups is its own optimizer step; a group's rows
    stay on one rank, so the other rank runs a zero-weight filler in each. Each step also replays the warm
    start's demonstrations (`warm_start.rl_nll_coef`: one group, so fillers again). Same weights as one process."""
    runs = tmp_path / "runs"
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"Read /app/a{i}.txt and do it."},
        {"role": "assistant", "content": f"```bash\ncat /app/a{i}.txt\n```"}]}) + "\n" for i in range(3)))
    warm = ["warm_start.enabled=true", f"warm_start.data={demos}", "warm_start.epochs=1", "warm_start.lr=1e-3",
            "warm_start.rl_nll_coef=1.0", "warm_start.rl_nll_batch=2"]
    for name, extra in (("one", []), ("two", ["--nproc", "2"])):
        res = legorl("train", str(write_cfg(tiny_run_config, name, 1)), "--no-progress",
                     "trainer.ppo_mini_batch_size=1", *warm, *extra)
        assert res.returncode == 0, res.stderr[-3000:]
        row = json.loads((runs / name / "logs" / f"{name}.jsonl").read_text().splitlines()[-1])
        assert row["actor/optimizer_steps"] == 2 and row["actor/demo_nll"] > 0
    w1, w2 = weights(runs / "one", 1), weights(runs / "two", 1)
    worst = max(float((w2[k] - w1[k]).norm() / w1[k].norm().clamp(min=1e-12)) for k in w1)
    assert worst < 1e-5, worst
