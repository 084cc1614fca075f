"""The async demo config (examples/demo-async.toml) end to end through `legorl train` on the tiny model, 2 steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_async_demo_config_trains_two_steps(tiny_llama_dir, tmp_path):
    cfg = ROOT / "examples" / "demo-async.toml"
    overrides = [f"model.path={tiny_llama_dir}", f"run.output_dir={tmp_path}", "trainer.total_steps=2",
                 "trainer.train_batch_size=2", "trainer.val_before_train=false", "trainer.test_freq=0",
                 "rollout.max_response_len=8", "algorithm.overlong_buffer=4", "rollout.concurrency=4",
                 # the random tiny model's groups are all alike: with filter_groups they would skip every update
                 "serving.kv_budget_tokens=8192", "algorithm.filter_groups=false"]
    proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), *overrides, "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "demo-async" / "logs" / "demo-async.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["fully_async/staleness/max"] <= 1  # the demo's bound
        assert "rollout_is/ess" in r and "fully_async/partial/partial_ratio" in r
        assert "overlong/penalized_share" in r  # the file's overlong buffer shapes the async updates too
    assert rows[-1]["weight_version"] == 2.0 and rows[-1]["actor_version"] == 2.0
    assert (tmp_path / "demo-async" / "checkpoints" / "step_2").is_dir()
