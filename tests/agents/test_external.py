"""Real agent CLIs as scaffolds: mini-swe-agent (host process, exec bridge), Claude Code and OpenCode
(inside the sandbox, behind the relay). Each test runs the real CLI against the proxy over the embedded
engine; a missing npm CLI is installed at its tested version first (`_cli_helpers.ensure_cli`)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from _cli_helpers import (
    HangingManager,
    ScriptedManager,
    assert_probe_ran_sandboxed,
    ensure_cli,
    policy_logprobs,
    procs_matching,
    run_trial,
    sandbox_probe,
)
from _cli_helpers import tool_call as _call

from legorl.agents.base import ScaffoldLimits, SessionEndpoint
from legorl.agents.claude_code import ClaudeCode
from legorl.agents.install import AgentNotInstalledError
from legorl.agents.mini_swe import MiniSweAgent
from legorl.agents.opencode import OpenCode
from legorl.env.local import LocalSandbox

needs_mini = pytest.mark.skipif(
    importlib.util.find_spec("minisweagent") is None,
    reason="mini-swe-agent is not installed (legorl agents install mini-swe-agent)",
)


# ---- mini-swe-agent --------------------------------------------------------------------------------


@needs_mini
async def test_mini_runs_commands_in_the_sandbox(tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    marker = tmp_path / "host-marker.txt"
    script = [
        _call(f"echo $(id -u) $(hostname) > proof.txt; echo from-mini > {marker}; ls /"),
        _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    limits = ScaffoldLimits(max_turns=4, timeout_sec=120, max_tokens_per_call=32)
    result, record, files = await run_trial(ScriptedManager(real, tok, script), tok, task, sandbox_root, tmp_path,
                                         limits)
    assert result.exit_status == "submitted", (result, (tmp_path / "logs" / "mini.log").read_text()[-3000:])
    uid, host = files["proof.txt"].split()
    assert host == "sandbox" and int(uid) != 0  # ran in the bubblewrap sandbox, as its non-root uid
    assert not marker.exists()  # a host path written from inside never reaches the host
    assert record.counters.calls == 2 and record.counters.tool_calls == 2
    policy = policy_logprobs(record)
    assert policy and all(lp is not None and lp <= 0 for lp in policy)
    cmds = json.loads((tmp_path / "logs" / "bridge_commands.json").read_text())
    assert [c["returncode"] for c in cmds] == [0, 0]


@needs_mini
async def test_mini_real_engine_rollout_is_captured(tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    limits = ScaffoldLimits(max_turns=2, timeout_sec=120, max_tokens_per_call=24, max_no_action=2)
    result, record, _ = await run_trial(real, tok, task, sandbox_root, tmp_path, limits)
    # Garbage from a random model ends by format errors or the turn limit; the calls are what matter.
    assert result.exit_status in ("no_action_limit", "turn_limit", "context_overflow"), result
    assert record.counters.calls >= 1 and sum(record.mask) > 0
    policy = policy_logprobs(record)
    assert all(lp is not None and lp <= 0 for lp in policy) and any(lp < 0 for lp in policy)
    traj = json.loads((tmp_path / "logs" / "mini.traj.json").read_text())
    assert traj["info"]["config"]["environment_type"].endswith("BridgeEnvironment")


@needs_mini
@pytest.mark.parametrize("how", ["own-timeout", "cancelled"])
async def test_mini_never_outlives_the_trial(tiny_stack, task, sandbox_root, tmp_path, how):
    real, tok = tiny_stack
    limits = ScaffoldLimits(max_turns=2, timeout_sec=3 if how == "own-timeout" else 600)
    run = run_trial(HangingManager(real, tok, []), tok, task, sandbox_root, tmp_path, limits,
                 wait=None if how == "own-timeout" else 8)
    if how == "own-timeout":
        result, _, _ = await run
        assert result.exit_status == "error" and "time limit" in (result.error or "")
    else:
        with pytest.raises(TimeoutError):
            await run
    assert not procs_matching(str(tmp_path / "logs" / "mini-legorl.yaml"))


async def test_missing_mini_names_the_install_command(tmp_path, task, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    endpoint = SessionEndpoint("http://127.0.0.1:1/v1", "http://127.0.0.1:1")
    with pytest.raises(AgentNotInstalledError, match="legorl agents install mini-swe-agent"):
        await MiniSweAgent().run("x", LocalSandbox(task), endpoint, ScaffoldLimits(), tmp_path)


# ---- in-sandbox CLIs: Claude Code, OpenCode ----------------------------------------------------------


CLIS = ["claude-code", "opencode"]


@pytest.fixture
def cli_installed(name):
    """The CLI under test, installed (or skipped only where npm is absent)."""
    return ensure_cli(name)


def _cli(name: str):
    """Each CLI with one tool (its shell), so its prompt fits the tiny model's 2048-token window."""
    return ClaudeCode(tools="Bash") if name == "claude-code" else OpenCode(tools=("bash",), context_window=2048)


def _cli_tool_call(name: str, command: str) -> str:
    if name == "claude-code":
        return _call(command, tool="Bash")
    return _call(command, tool="bash", description="Write the proof file")


@pytest.mark.parametrize("name", CLIS)
async def test_cli_runs_its_tools_in_the_sandbox(name, cli_installed, tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    marker = tmp_path / "host-marker.txt"
    script = [_cli_tool_call(name, sandbox_probe(marker)), "Done."]
    limits = ScaffoldLimits(max_turns=4, timeout_sec=120, max_tokens_per_call=64)
    result, record, files = await run_trial(ScriptedManager(real, tok, script), tok, task, sandbox_root, tmp_path,
                                         limits, _cli(name))
    logs = tmp_path / "logs"
    stem = "claude" if name == "claude-code" else "opencode"
    assert_probe_ran_sandboxed(files, marker, result, logs, stem)
    assert result.exit_status == "finished", result
    assert result.metadata["tool_uses"] >= 1
    assert record.counters.calls >= 2 and record.counters.tool_calls >= 1
    policy = policy_logprobs(record)
    assert policy and all(lp is not None and lp <= 0 for lp in policy)


@pytest.mark.parametrize("name", CLIS)
async def test_cli_never_outlives_the_trial(name, cli_installed, tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    limits = ScaffoldLimits(max_turns=2, timeout_sec=8, max_tokens_per_call=32)
    result, _, _ = await run_trial(HangingManager(real, tok, []), tok, task, sandbox_root, tmp_path, limits,
                                _cli(name))
    assert result.exit_status == "error" and "time limit" in (result.error or "")
    # this trial's bubblewrap (its binds name sandbox_root) and so its pid namespace, the CLI included, are
    # gone; not "/opt/legorl/agent/": under xdist the other worker may be running a CLI test of its own
    assert not procs_matching(str(sandbox_root))


@pytest.mark.parametrize("name", ["claude-code", "opencode"])
async def test_missing_cli_names_the_install_command(name, tmp_path, task, monkeypatch):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("LEGORL_CLAUDE_BIN", raising=False)
    monkeypatch.delenv("LEGORL_OPENCODE_BIN", raising=False)
    endpoint = SessionEndpoint("http://127.0.0.1:1/v1", "http://127.0.0.1:1")
    scaffold = ClaudeCode() if name == "claude-code" else OpenCode()
    with pytest.raises(AgentNotInstalledError, match=f"legorl agents install {name}"):
        await scaffold.run("x", LocalSandbox(task), endpoint, ScaffoldLimits(), tmp_path)


@needs_mini
@pytest.mark.slow
async def test_mini_with_the_default_model(smollm_dir, task, sandbox_root, tmp_path):
    """SmolLM2-135M (the default model, its real chat template) drives the real `mini` loop for two turns
    (the second sees the first's observation): every call is captured with its logprobs whatever the model
    manages to do. Two turns of 64 tokens prove it as three of 96 did (the tiny-model tests above cover the
    bridge, the limits and the scripted tool calls)."""
    from legorl.models.chat import load_tokenizer
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.manager import SingleReplicaManager

    engine = EmbeddedEngine.from_pretrained(smollm_dir, kv_budget_tokens=16384, seed=0)
    try:
        manager = SingleReplicaManager(engine, engine.max_model_len)
        limits = ScaffoldLimits(max_turns=2, timeout_sec=300, max_tokens_per_call=64, temperature=0.7)
        result, record, _ = await run_trial(manager, load_tokenizer(smollm_dir), task, sandbox_root, tmp_path, limits)
    finally:
        await engine.close()
    assert result.exit_status in ("submitted", "turn_limit", "no_action_limit", "context_overflow"), result
    assert result.turns == record.counters.calls >= 1
    policy = policy_logprobs(record)
    assert policy and all(lp is not None and lp <= 0 for lp in policy)
    assert isinstance(json.loads((tmp_path / "logs" / "bridge_commands.json").read_text()), list)
