"""Two `legorl train` steps with `agent.name = "codex"` on a tiny model: the real `codex exec` in each trial's
sandbox, its Responses API calls through the proxy, the trainer on what the proxy recorded.

The model is tiny-llama tuned to answer with one `exec_command` call (tests/_tool_model.py; a random model
never calls a tool), so every trial runs a command whose output (`legorl-out-42`, which the reply itself
never spells) comes back to the model: the test checks that it is context (mask 0), never a policy
token, that the policy tokens are exactly what the engine sampled with logprobs, and that the trainer's
logprobs match the rollout's (fp32, gated at 1e-5)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _tool_model import tool_calling_model

ROOT = Path(__file__).resolve().parents[2]
REPLY = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "echo legorl-out-$((6*7))"}}\n</tool_call>'
CONFIG = """
[run]
name = "codex-train"
seed = 0

[tasks]
train = "builtin:shell-basics"
val_fraction = 0.0

[rollout]
temperature = 0.5              # sampled, not greedy: the tuned call survives it (tests/_tool_model.py)
max_turns = 2
max_response_len = 48
max_prompt_len = 1900
concurrency = 4

[agent]
name = "codex"
timeout_sec = 240
kwargs = { context_window = 2048 }

[serving]
kv_budget_tokens = 16384

[algorithm]
adv_estimator = "grpo"
n_resp_per_prompt = 2

[trainer]
train_batch_size = 2
total_steps = 2
lr = 1e-5
micro_batch_size = 2
val_before_train = false
test_freq = 0
save_freq = 0
max_logprob_abs_diff = 1e-5
"""


@pytest.fixture(scope="module")
def tool_model(tiny_llama_dir):
    return tool_calling_model(Path(tiny_llama_dir), REPLY)


@pytest.mark.slow
def test_codex_trains_two_steps(tool_model, tmp_path):
    import sys as _sys

    _sys.path.insert(0, str(ROOT / "tests" / "agents"))
    from _cli_helpers import ensure_cli

    from legorl.models.chat import load_tokenizer

    ensure_cli("codex")
    cfg = tmp_path / "codex.toml"
    cfg.write_text(CONFIG)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), f"model.path={tool_model}",
                           f"run.output_dir={tmp_path}", "--no-progress"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"legorl train: {time.monotonic() - t0:.1f} s")
    run = tmp_path / "codex-train"
    rows = [json.loads(x) for x in (run / "logs" / "codex-train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout_corr/abs_diff_mean"] <= 1e-5 for r in rows), [r["rollout_corr/abs_diff_mean"] for r in rows]
    tok = load_tokenizer(tool_model)
    trajs = sorted(run.rglob("proxy_trajectory.json"))
    assert len(trajs) == 2 * 2 * 2  # steps x tasks x attempts
    ran = 0
    for path in trajs:
        rec = json.loads(path.read_text())
        assert (path.parent / "agent" / "codex-args.json").is_file()  # the codex adapter ran this trial
        events = (path.parent / "agent" / "codex.stdout").read_text()
        meta = json.loads((path.parent / "result.json").read_text())["metadata"]
        # Codex's helper links under CODEX_HOME/tmp once made the whole /logs/agent download fail
        assert meta["harness"] == "codex" and not meta.get("artifacts_missing"), meta.get("artifacts_missing")
        assert rec["counters"]["calls"] >= 1
        for b in rec["branches"]:
            ids, mask, lps = b["token_ids"], b["mask"], b["logprobs"]
            policy = [t for t, m in zip(ids, mask, strict=True) if m]
            assert all(lp is not None and lp <= 0 for lp, m in zip(lps, mask, strict=True) if m)
            sampled = tok.decode(policy)
            context = tok.decode([t for t, m in zip(ids, mask, strict=True) if not m])
            assert "legorl-out-42" not in sampled  # a command's output is never a policy token
            assert "You are a coding agent in a Linux sandbox" in context  # Codex's prompt, as context
            if "legorl-out-42" in context:
                assert "exec_command" in sampled and "legorl-out-42" in events  # Codex ran it and sent it back
                ran += 1
    # the tuned model writes the whole call with p >= 0.997 on Codex's prompts (tests/_tool_model.py): most trials run it
    assert ran >= 4, ran
