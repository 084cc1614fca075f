"""examples/agent-mini.toml through `legorl train` on the tiny model, one step: mini-swe-agent (the real `mini`
CLI, text protocol) in training. Every model call it makes is captured by the proxy, the recorded policy
tokens are exactly the engine's completions, mini's own text (prompts, format-error messages, command
outputs) is never a policy token, and the trainer's logprobs match the rollout's (fp32, gated at 1e-5)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINI_TEXT = ("Please solve this issue", "Format error", "<returncode>", "mswea_bash_command\nyour_command_here")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("minisweagent") is None,
                    reason="mini-swe-agent is not installed (legorl agents install mini-swe-agent)")
def test_agent_mini_config_trains_one_step(tiny_llama_dir, tmp_path):
    from legorl.models.chat import load_tokenizer

    overrides = [f"model.path={tiny_llama_dir}", f"run.output_dir={tmp_path}", "trainer.total_steps=1",
                 "trainer.train_batch_size=2", "trainer.max_logprob_abs_diff=1e-5", "rollout.max_response_len=8",
                 "rollout.max_prompt_len=1900", "serving.kv_budget_tokens=32768"]
    proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(ROOT / "examples" / "agent-mini.toml"),
                           *overrides, "--no-progress"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "agent-mini" / "logs" / "agent-mini.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["rollout_corr/abs_diff_mean"] <= 1e-5
    tok = load_tokenizer(tiny_llama_dir)
    trajs = sorted((tmp_path / "agent-mini").rglob("proxy_trajectory.json"))
    assert len(trajs) == 2 * 2
    calls = 0
    for path in trajs:
        rec = json.loads(path.read_text())
        assert (path.parent / "agent" / "mini.traj.json").is_file()  # mini itself ran and wrote its trajectory
        counters = rec["counters"]
        calls += counters["calls"]
        completion = 0
        for branch in rec["branches"]:
            # mini drops a reply without an action from its history, so the next call rewrites the
            # conversation: the cut-off replies are kept in `superseded` segments (docs/proxy.md)
            for seg in [branch, *branch["superseded"]]:
                ids, mask = seg["token_ids"], seg["mask"]
                policy = [t for t, m in zip(ids, mask, strict=True) if m]
                completion += len(policy)
                assert all(lp is not None for lp, m in zip(seg["logprobs"], mask, strict=True) if m)
                replies = tok.decode(policy)
                assert not any(s in replies for s in MINI_TEXT[:3]), replies
            context = tok.decode([t for t, m in zip(branch["token_ids"], branch["mask"], strict=True) if not m])
            assert "Please solve this issue" in context  # mini's own prompt, as context
        assert completion == counters["completion_tokens"] > 0  # each sampled token recorded once
    assert calls >= 4
