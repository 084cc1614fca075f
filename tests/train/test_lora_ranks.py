"""`legorl train --nproc 2` with a LoRA adapter: two FSDP2 ranks (gloo) train the same adapter as one process,
sync and checkpoint the adapter only (no base shards in `dcp/`), and `--resume` continues on two ranks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from test_trainer_ranks import legorl, steps_logged, write_cfg

LORA = ["model.lora.rank=4", "model.lora.alpha=8", "trainer.lr=1e-2"]


@pytest.mark.slow
def test_two_ranks_train_the_adapter_like_one_process_and_resume(tmp_path, tiny_run_config):
    runs = tmp_path / "runs"
    one = legorl("train", str(write_cfg(tiny_run_config, "one", 1)), "--no-progress", *LORA)
    assert one.returncode == 0, one.stderr[-3000:]
    cfg = write_cfg(tiny_run_config, "two", 1)
    two = legorl("train", str(cfg), "--no-progress", "--nproc", "2", *LORA)
    assert two.returncode == 0, two.stderr[-3000:]
    ckpt = runs / "two" / "checkpoints" / "step_1"
    a1 = load_file(str(runs / "one" / "checkpoints" / "step_1" / "adapter.safetensors"))
    a2 = load_file(str(ckpt / "adapter.safetensors"))
    assert a1.keys() == a2.keys() and any(k.endswith("lora_B") and a1[k].abs().max() > 0 for k in a1)
    worst = max(float((a2[k] - a1[k]).norm() / a1[k].norm().clamp(min=1e-12)) for k in a1)
    assert worst < 1e-5, worst
    import torch.distributed.checkpoint as dcp

    saved = dcp.FileSystemReader(str(ckpt / "dcp")).read_metadata().state_dict_metadata
    model_keys = {k.removeprefix("model.") for k in saved if k.startswith("model.")}
    assert model_keys == set(a2)  # the adapter's shards only: no base weight in the checkpoint
    assert sum(k.endswith("exp_avg_sq") for k in saved) == sum(k.endswith(("lora_A", "lora_B")) for k in a2)
    adapter_bytes = sum(v.numel() * v.element_size() for v in a2.values())
    m = json.loads((runs / "two" / "logs" / "two.jsonl").read_text().splitlines()[-1])
    assert m["weight_sync/bytes"] == adapter_bytes and m["rollout_corr/abs_diff_mean"] <= 1e-5
    res = legorl("train", str(cfg), "--resume", "--no-progress", "--nproc", "2", *LORA, "trainer.total_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout and steps_logged(runs / "two") == [1, 2]
    a3 = load_file(str(runs / "two" / "checkpoints" / "step_2" / "adapter.safetensors"))
    assert any(not torch.equal(a3[k], a2[k]) for k in a2)
