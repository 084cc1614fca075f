"""Codex (`codex exec`, the real CLI) inside the sandbox, through the relay and the proxy's Responses API,
over the embedded tiny model. The CLI is installed at its tested version when missing (`ensure_cli`)."""

from __future__ import annotations

import json

import pytest
from _cli_helpers import (
    HangingManager,
    ScriptedManager,
    assert_output_is_context,
    assert_probe_ran_sandboxed,
    ensure_cli,
    policy_logprobs,
    procs_matching,
    run_trial,
    sandbox_probe,
    teacher_forced_mean_delta,
)
from _cli_helpers import tool_call as _call

from legorl.agents.base import ScaffoldLimits
from legorl.agents.bridge_sandbox import CliRun
from legorl.agents.codex import Codex, codex_overrides, parse_events, toml_value


@pytest.fixture
def codex_installed():
    return ensure_cli("codex")


def _codex() -> Codex:
    return Codex(context_window=2048)  # the tiny model's window: Codex is told the truth


def test_overrides_are_offline_and_toml():
    from legorl.agents.base import SessionEndpoint

    cfg = codex_overrides(SessionEndpoint("u/v1", "u", model="pol"), ScaffoldLimits(max_tokens_per_call=48))
    provider = cfg["model_providers.legorl"]
    assert provider["wire_api"] == "responses" and provider["base_url"].startswith("http://127.0.0.1:")
    assert provider["http_headers"]["X-Legorl-Max-Output-Tokens"] == "48" and cfg["web_search"] == "disabled"
    assert toml_value(provider["http_headers"]) == '{"X-Legorl-Max-Output-Tokens" = "48", "X-Legorl-Temperature" = "1.0"}'
    assert toml_value([1, True, "a\"b"]) == '[1, true, "a\\"b"]'


def test_outcomes():
    def run(*events, **kw):
        return CliRun(kw.get("rc", 0), kw.get("timed_out", False), "\n".join(json.dumps(e) for e in events), "",
                      1.0, kw.get("requests", 2), refused_calls=kw.get("refused", 0))

    cmd = {"type": "item.completed", "item": {"type": "command_execution", "command": "ls"}}
    ok = parse_events(run(cmd, {"type": "turn.completed", "usage": {}}))
    assert (ok.exit_status, ok.turns, ok.metadata["tool_uses"]) == ("finished", 2, 1)
    assert parse_events(run(cmd, {"type": "turn.failed"}, refused=1, rc=1)).exit_status == "turn_limit"
    over = parse_events(run({"type": "turn.failed", "error": {"message": "prompt is too long for the context window"}},
                            rc=1))
    assert over.exit_status == "context_overflow"
    cut = {"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: max_output_tokens"}}
    assert parse_events(run(cut, rc=1)).exit_status == "finished"
    assert parse_events(run(rc=1)).exit_status == "error"
    assert "time limit" in parse_events(run(timed_out=True)).error


async def test_codex_runs_its_shell_in_the_sandbox(codex_installed, tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    marker = tmp_path / "host-marker.txt"
    script = [_call(sandbox_probe(marker), tool="exec_command")
              .replace('"command"', '"cmd"'), "Done."]
    limits = ScaffoldLimits(max_turns=4, timeout_sec=120, max_tokens_per_call=64)
    result, record, files = await run_trial(ScriptedManager(real, tok, script), tok, task, sandbox_root, tmp_path,
                                            limits, _codex())
    logs = tmp_path / "logs"
    assert_probe_ran_sandboxed(files, marker, result, logs, "codex")
    assert result.exit_status == "finished" and result.metadata["tool_uses"] == 1, result
    assert record.counters.calls == 2 and record.counters.tool_calls == 1
    assert record.counters.extensions == 1 and record.counters.rewrites == 0  # Codex sent back what it got
    assert_output_is_context(record, tok, "No such file", "Done.")


async def test_codex_real_engine_rollout_is_captured(codex_installed, tiny_stack, tiny_llama_dir, task, sandbox_root,
                                                     tmp_path):
    real, tok = tiny_stack
    limits = ScaffoldLimits(max_turns=2, timeout_sec=180, max_tokens_per_call=32)
    result, record, _ = await run_trial(real, tok, task, sandbox_root, tmp_path, limits, _codex())
    # a random model's reply: no tool call (finished), or cut at max_tokens_per_call (finished too)
    assert result.exit_status in ("finished", "turn_limit"), result
    assert result.metadata["relay_requests"] >= 1, result
    assert record.counters.calls >= 1 and sum(record.mask) > 0, (result, record.counters)
    assert max(len(b.token_ids) for b in record.branches) > 1000  # Codex's tools and prompt reached the model
    policy = policy_logprobs(record)
    assert all(lp is not None and lp <= 0 for lp in policy) and any(lp < 0 for lp in policy)
    delta = teacher_forced_mean_delta(tiny_llama_dir, record.main)  # rollout vs an fp32 recompute: what the trainer sees
    assert delta <= 1e-5, delta


async def test_codex_never_outlives_the_trial(codex_installed, tiny_stack, task, sandbox_root, tmp_path):
    real, tok = tiny_stack
    limits = ScaffoldLimits(max_turns=2, timeout_sec=8, max_tokens_per_call=32)
    result, _, _ = await run_trial(HangingManager(real, tok, []), tok, task, sandbox_root, tmp_path, limits, _codex())
    assert result.exit_status == "error" and "time limit" in (result.error or "")
    assert not procs_matching(str(sandbox_root))
