"""Qwen Code (the real `qwen` CLI, a node bundle) inside the sandbox, through the relay and the proxy's chat
completions, over the embedded tiny model. Its bare first call is ~2.6k tokens, past tiny-llama's 2048
positions, so these tests serve the same weights with a 4096-token window (RoPE has no fixed length; only
the config's limit changes). The CLI is installed at its tested version when missing (`ensure_cli`)."""

from __future__ import annotations

import asyncio
import json

import pytest
from _cli_helpers import (
    ScriptedManager,
    assert_output_is_context,
    assert_probe_ran_sandboxed,
    ensure_cli,
    run_trial,
    sandbox_probe,
)
from _cli_helpers import tool_call as _call

from legorl.agents.base import ScaffoldLimits, SessionEndpoint
from legorl.agents.bridge_sandbox import CliRun
from legorl.agents.qwen_code import QwenCode, parse_events
from legorl.serving.manager import SingleReplicaManager

WINDOW = 4096  # the window of conftest.py's long_tiny_dir (LONG_WINDOW)


@pytest.fixture
def qwen_installed():
    return ensure_cli("qwen-code")


@pytest.fixture(scope="module")
def long_stack(long_tiny_dir):
    from legorl.models.chat import load_tokenizer
    from legorl.serving.embedded import EmbeddedEngine

    engine = EmbeddedEngine.from_pretrained(long_tiny_dir, kv_budget_tokens=16384, seed=0)
    assert engine.max_model_len == WINDOW
    yield SingleReplicaManager(engine, engine.max_model_len), load_tokenizer(long_tiny_dir)
    asyncio.run(engine.close())


class _Recording(ScriptedManager):
    """The scripted policy, noting the temperature each call asked the engine for."""

    temperatures: list[float]

    async def generate(self, request):
        self.temperatures = [*getattr(self, "temperatures", []), request.sampling.temperature]
        return await super().generate(request)


def test_args_are_bare_with_few_tools():
    q = QwenCode()
    a = q.args("do it", SessionEndpoint("u/v1", "u", model="pol"), ScaffoldLimits(max_turns=3))
    assert a[:2] == ["--bare", "--auth-type"] and a[-1] == "--prompt=do it"
    assert a[a.index("--max-session-turns") + 1] == "3" and a[a.index("--core-tools") + 1] == "run_shell_command"
    excluded = a[a.index("--exclude-tools") + 1 : a.index("--system-prompt")]
    assert "get_goal" in excluded and "read_file" not in excluded  # excluding read_file would deny `cat`
    env = q.environment(SessionEndpoint("u/v1", "u", api_key="k"), ScaffoldLimits(max_tokens_per_call=40))
    assert env["QWEN_CODE_MAX_OUTPUT_TOKENS"] == "40" and env["OPENAI_API_KEY"] == "k"


def test_outcomes():
    def run(*events, rc=0, timed_out=False):
        return CliRun(rc, timed_out, "\n".join(json.dumps(e) for e in events), "", 1.0, 2)

    use = {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "run_shell_command"}]}}
    ok = parse_events(run(use, {"type": "result", "subtype": "success", "is_error": False}))
    assert (ok.exit_status, ok.metadata["tool_uses"]) == ("finished", 1)
    over = {"type": "result", "subtype": "error_during_execution", "is_error": True,
            "error": {"message": "[API Error: 400 prompt is too long: 4178 tokens + max_tokens 48 > 2048 maximum "
                                 "(the model's context window)]"}}
    assert parse_events(run(over, rc=1)).exit_status == "context_overflow"
    turns = {"type": "result", "subtype": "error_max_turns", "is_error": True}
    assert parse_events(run(turns, rc=53)).exit_status == "turn_limit"
    assert parse_events(run(rc=1)).exit_status == "error"
    assert "time limit" in parse_events(run(timed_out=True)).error


async def test_qwen_runs_its_shell_in_the_sandbox(qwen_installed, long_stack, task, sandbox_root, tmp_path):
    real, tok = long_stack
    marker = tmp_path / "host-marker.txt"
    script = [_call(sandbox_probe(marker) + "; cat nothing-here",
                    tool="run_shell_command"), "Done."]
    limits = ScaffoldLimits(max_turns=4, timeout_sec=120, max_tokens_per_call=64, temperature=0.7)
    manager = _Recording(real, tok, script)
    result, record, files = await run_trial(manager, tok, task, sandbox_root, tmp_path, limits, QwenCode())
    logs = tmp_path / "logs"
    assert_probe_ran_sandboxed(files, marker, result, logs, "qwen")
    assert result.exit_status == "finished" and result.metadata["tool_uses"] == 1, result
    assert record.counters.calls == 2 and record.counters.tool_calls == 1
    assert record.counters.extensions == 1 and record.counters.rewrites == 0  # Qwen Code sent back what it got
    assert manager.temperatures == [0.7, 0.7]  # Qwen Code sends none: the relay's header carried the trial's
    assert_output_is_context(record, tok, "No such file", "Done.")
