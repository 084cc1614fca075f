"""The in-sandbox harnesses as a user runs them: `legorl eval TASKS -a NAME -m MODEL --agent-opt ...` over the
tiny model, each call recorded by the proxy (masks, logprobs) and the trial scored, not errored.

tests/agents/test_external.py and test_qwen_code.py drive each scaffold object on scripted policies (tool calls
a random model cannot write, hangs, missing binaries); Codex and mini-swe-agent go through `legorl train`
(tests/train/test_agent_codex.py, test_agent_mini.py). Here Claude Code, OpenCode and Qwen Code go through the
eval CLI's agent options, its scaffold registry and its trial artifacts (these replace the in-process
real-engine capture tests those files had). Qwen Code's prompt and tools are
~1.7k tokens, so it samples from the tiny model with a longer window (conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from _cli_helpers import ensure_cli, teacher_forced_mean_delta

# each harness with one tool (its shell), so its prompt fits the tiny model's window
CASES = {
    "claude-code": ["--agent-opt", 'tools="Bash"'],
    "opencode": ["--agent-opt", 'tools=["bash"]', "--agent-opt", "context_window=2048"],
    "qwen-code": [],
}


def roomy_task(tmp_path) -> str:
    """shell-basics' append-line with 2 GB instead of its 512 MB. The agent runs inside the sandbox and counts
    against the task's memory, as in Harbor; OpenCode needs ~0.5-1 GB, and at 512 MB it was once killed (an
    `agent_error`, not a score) in a suite run from a fresh clone (2026-12-07), then passed six runs in a row."""
    import shutil
    from pathlib import Path

    from legorl.tasks.builtin_sets import builtin_path

    task = tmp_path / "tasks" / "append-line"
    shutil.copytree(Path(builtin_path("shell-basics")) / "append-line", task)
    toml = task / "task.toml"
    assert "memory_mb = 512" in toml.read_text()
    toml.write_text(toml.read_text().replace("memory_mb = 512", "memory_mb = 2048"))
    return str(task)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_legorl_eval_runs_the_harness_and_records_its_calls(name, tiny_llama_dir, long_tiny_dir, tmp_path):
    ensure_cli(name)
    model = long_tiny_dir if name == "qwen-code" else tiny_llama_dir
    out = tmp_path / "ev"
    res = subprocess.run(
        [sys.executable, "-m", "legorl.cli", "eval", roomy_task(tmp_path), "-a", name,
         "-m", str(model), "--max-turns", "2", "--max-tokens", "32", "--timeout", "180", "-t", "1.0", "-o", str(out),
         *CASES[name]],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (trial,) = json.loads((out / "results.json").read_text())["trials"]
    meta = trial["metadata"]
    # a random model's reply: scored by the verifier (0), never an infrastructure error
    assert trial["outcome"] == "failed" and trial["reward"] == 0.0, trial
    assert meta["harness"] == name and meta["exit_status"] in ("finished", "turn_limit"), meta
    assert meta["scaffold_relay_requests"] >= 1 and trial["policy_tokens"] > 0, meta
    record = json.loads((out / "trials" / "eval" / "step_0" / trial["trial_id"] / "proxy_trajectory.json").read_text())
    main = max(record["branches"], key=lambda b: sum(b["mask"]))
    if name == "qwen-code":  # its prompt and tools (~1.7k tokens) reached the model whole
        assert len(main["token_ids"]) > 1500
    policy = [lp for lp, m in zip(main["logprobs"], main["mask"], strict=True) if m]
    assert policy and all(lp is not None and lp <= 0 for lp in policy) and any(lp < 0 for lp in policy)
    # the recorded logprobs (sampled at T 1.0) are what an fp32 recompute of the same tokens gives
    branch = SimpleNamespace(token_ids=main["token_ids"], mask=main["mask"], logprobs=main["logprobs"])
    assert teacher_forced_mean_delta(model, branch) <= 1e-5
