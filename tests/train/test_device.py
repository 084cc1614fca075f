"""The GPU path is chosen by config alone (`trainer.device`, `serving.device`); here (CPU only) the CUDA
tests skip with a reason, and asking for CUDA without one fails in one line before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from legorl.config import load_config
from legorl.train.device import DeviceUnavailableError, resolve_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def test_auto_is_cpu_here_and_cuda_is_refused_with_a_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DeviceUnavailableError, match=r"trainer\.device"):
        resolve_device("cuda")


def test_train_with_cuda_on_a_cpu_machine_exits_2_in_one_line(tmp_path, tiny_run_config):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = tiny_run_config("t")
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), "trainer.device=cuda", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert "trainer.device='cuda' but no CUDA device is visible" in res.stdout + res.stderr


@needs_cuda
async def test_engine_and_trainer_on_cuda_in_bf16(tiny_llama_dir):
    from _rollout_helpers import multi_turn_rollouts

    from legorl.models.chat import load_tokenizer
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.train.batch import collate
    from legorl.train.build import build_trainer

    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, device="cuda", dtype=torch.bfloat16)
    try:
        assert engine.pool.k.device.type == "cuda"
        rollouts = await multi_turn_rollouts(engine, load_tokenizer(tiny_llama_dir), 4)
    finally:
        await engine.close()
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "trainer.device=cuda", "trainer.dtype=bfloat16",
                             "serving.dtype=bfloat16", "algorithm.entropy_coef=0.01"])
    trainer = build_trainer(cfg, tiny_llama_dir)
    assert next(trainer.actor.model.parameters()).device.type == "cuda"
    m = trainer.update(collate(rollouts))
    assert m["rollout_corr/abs_diff_mean"] < 0.1 and m["actor/grad_norm"] > 0
