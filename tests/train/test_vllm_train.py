"""Two sync training steps end to end with vLLM (CPU build) as the rollout engine.

A tiny random Llama with head size 32 (vLLM's CPU attention has no kernel for the registered tiny model's 16)
and SmolLM2's tokenizer and tied embeddings; SmolLM2-135M itself made each CPU training step ~40 s. Builtin
scaffold -> proxy -> sticky pool of two vLLM servers -> verifier -> GRPO step -> weight reload in
both servers -> step 2 samples from the reloaded weights, and its rollout/trainer logprob agreement
proves the servers serve exactly what the trainer holds (a tied embedding once broke this).
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1 as in CI).
"""

from __future__ import annotations

import asyncio
import json

import pytest


@pytest.mark.slow
def test_two_sync_steps_with_vllm(vllm_executable, tmp_path, tiny_run_config):
    from legorl.config import load_config
    from legorl.models.tiny import build_tiny_llama
    from legorl.train.loop import train

    build_tiny_llama(tmp_path / "model", head_dim=32)
    path = tiny_run_config(
        "v", model={"path": str(tmp_path / "model")},
        rollout={"max_response_len": 16, "max_prompt_len": 1024},
        serving={"engine": "vllm", "n_replicas": 2, "vllm": {"kv_cache_gib": 1, "executable": vllm_executable}},
        trainer={"train_batch_size": 2, "total_steps": 2, "lr": 1e-4, "max_logprob_abs_diff": 1e-3},
    )
    lines: list[str] = []
    history = asyncio.run(train(load_config(path), on_line=lines.append, progress=False))
    assert [h["step"] for h in history] == [1, 2]
    m = history[0]
    # the oldest version a replica serves; set only after each server answered reload_weights,
    # reset_prefix_cache and update_weight_version
    assert m["weight_version"] == 1.0
    assert m["rollout_corr/abs_diff_mean"] < 1e-4  # vLLM fp32 logprobs agree with the fp32 trainer
    assert m["actor/grad_norm"] > 0
    # step 2 was sampled by the servers after they reloaded step 1's weights
    assert history[1]["weight_version"] == 2.0 and history[1]["rollout_corr/abs_diff_mean"] < 1e-4
    run = tmp_path / "runs" / "v"
    assert any(line.startswith("step:1 - ") for line in lines)
    for i in (0, 1):  # each server's log is kept with the run
        assert list((run / "vllm").glob(f"replica{i}/server-*.log"))
    trials = list((run / "trials").rglob("*.json"))
    assert trials and any(json.loads(t.read_text()).get("outcome") for t in trials[:4])


@pytest.mark.slow
def test_legorl_train_with_the_collective_weight_transport(vllm_executable, tmp_path, tiny_run_config):
    """`legorl train ... serving.vllm.weight_transport=collective`: the same two steps (one server), the weights
    going over a gloo pair into the server's worker extension instead of files. Step 2 sampled from what the
    first sync delivered, and its logprobs agree with the trainer's to fp32 precision (a failed collective sync
    raises, so the run could not have finished by another path)."""
    import subprocess
    import sys

    from legorl.models.tiny import build_tiny_llama

    build_tiny_llama(tmp_path / "model", head_dim=32)
    path = tiny_run_config(
        "c", model={"path": str(tmp_path / "model")},
        rollout={"max_response_len": 16, "max_prompt_len": 1024},
        serving={"engine": "vllm", "vllm": {"kv_cache_gib": 1, "executable": vllm_executable}},
        trainer={"train_batch_size": 2, "total_steps": 2, "lr": 1e-4, "max_logprob_abs_diff": 1e-3},
    )
    proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(path), "serving.engine=vllm",
                           "serving.vllm.weight_transport=collective", "serving.vllm.weight_sync_timeout_s=60",
                           "--no-progress"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = tmp_path / "runs" / "c"
    rows = [json.loads(x) for x in (run / "logs" / "c.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["weight_version"] for r in rows] == [1.0, 2.0]
    for r in rows:
        assert r["rollout_corr/abs_diff_mean"] <= 1e-5
    assert rows[0]["weight_sync/bytes"] > 0
    (log,) = (run / "vllm").glob("replica0/server-*.log")
    assert "legorl_vllm_worker_ext.WeightReceiver" in log.read_text()  # the server loaded the extension
