"""`legorl train` with `model.lora.rank` set from the CLI on the tiny model, after a warm start: 2 steps,
adapter-only checkpoints and weight syncs, `--resume`, then `legorl export` as a PEFT adapter (loaded by peft) and
`--merge`, both onto the warm-started model the adapter was trained on (read from the run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file


def legorl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


LORA = ["model.lora.rank=4", "model.lora.alpha=8", "trainer.lr=1e-2"]


@pytest.mark.slow
def test_lora_train_resume_and_export(tmp_path, tiny_run_config, tiny_llama_dir):
    demos = tmp_path / "demos.jsonl"
    msgs = [{"role": "user", "content": "Read /app/a.txt and do it."},
            {"role": "assistant", "content": "```bash\ncat /app/a.txt\n```"}]
    demos.write_text("".join(json.dumps({"messages": msgs}) + "\n" for _ in range(2)))
    cfg = tiny_run_config("t", trainer={"train_batch_size": 2, "total_steps": 2, "save_freq": 1,
                                        "max_logprob_abs_diff": 1e-3},
                          warm_start={"enabled": True, "data": str(demos), "epochs": 1, "lr": 1e-2})
    run = tmp_path / "runs" / "t"
    warm = run / "warm_start" / "model"  # the adapter's base
    res = legorl("train", str(cfg), "--no-progress", *LORA)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = run / "checkpoints" / "step_2"
    assert (ckpt / "adapter.safetensors").is_file() and not (ckpt / "model.safetensors").exists()
    adapter = load_file(str(ckpt / "adapter.safetensors"))
    base_bytes = sum(v.numel() * 4 for v in load_file(str(Path(tiny_llama_dir) / "model.safetensors")).values())
    adapter_bytes = sum(v.numel() * v.element_size() for v in adapter.values())
    assert adapter_bytes < 0.2 * base_bytes
    assert "state" in torch.load(ckpt / "optim.pt", weights_only=False)["optimizer"]
    m = [json.loads(line) for line in (run / "logs" / "t.jsonl").read_text().splitlines()]
    assert m[0]["step"] == 0 and m[0]["warm_start/transcripts"] == 2  # the warm start's record
    m = m[1:]
    assert [r["step"] for r in m] == [1, 2]
    assert all(r["weight_sync/bytes"] == adapter_bytes for r in m)  # the adapter only, every sync
    assert all(r["rollout_corr/abs_diff_mean"] <= 1e-5 for r in m)  # the engine served the synced adapter

    res = legorl("train", str(cfg), "--resume", "--no-progress", *LORA, "trainer.total_steps=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stdout
    assert [json.loads(line)["step"] for line in (run / "logs" / "t.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    wrong = legorl("train", str(cfg), "--resume", "--no-progress", "trainer.total_steps=4")
    assert wrong.returncode == 2 and "model.lora.rank" in wrong.stderr, wrong.stderr[-2000:]

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"  # no --model: the base is read from the run
    res = legorl("export", str(run), str(out))
    assert res.returncode == 0 and f"base model: {warm}" in res.stderr, res.stderr[-2000:]
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(warm)
    merged_dir = tmp_path / "merged"
    res = legorl("export", str(run), str(merged_dir), "--merge")
    assert res.returncode == 0, res.stderr[-2000:]

    # the trainer's own forward on the step-3 adapter is the reference
    from legorl.config import load_config
    from legorl.train.lora import attach_lora, load_adapter

    mine = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32).eval()
    attach_lora(mine, load_config(None, LORA).model.lora)
    load_adapter(mine, load_file(str(run / "checkpoints" / "step_3" / "adapter.safetensors")))
    base = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32).eval()
    peft_model = PeftModel.from_pretrained(base, out).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    plain = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32).eval()
    first = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    ids = torch.arange(3, 50).unsqueeze(0)
    with torch.no_grad():
        ref = mine(input_ids=ids).logits
        assert (ref - plain(input_ids=ids).logits).abs().max() > 1e-3  # the adapter learned something
        assert (plain(input_ids=ids).logits - first(input_ids=ids).logits).abs().max() > 1e-3  # so did the warm start
        assert (peft_model(input_ids=ids).logits - ref).abs().max() < 1e-5
        assert (merged(input_ids=ids).logits - ref).abs().max() < 1e-5


def test_export_outside_a_run_asks_for_the_base_model(tmp_path):
    ckpt = tmp_path / "step_3"
    ckpt.mkdir()
    res = legorl("export", str(ckpt), str(tmp_path / "out"))
    assert res.returncode == 2 and "--model" in res.stderr, res.stderr[-2000:]
    res = legorl("export", str(tmp_path / "missing"), str(tmp_path / "out"))
    assert res.returncode == 2 and "no such directory" in res.stderr, res.stderr[-2000:]
