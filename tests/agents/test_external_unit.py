"""Pieces of the external-agent adapters, without an agent CLI: exec bridge, host relay, staging,
generated configs, outcome parsing, OpenHands' refusal and the `legorl agents` command."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import uuid
from pathlib import Path

import aiohttp
import pytest
import typer
from aiohttp import web
from typer.testing import CliRunner

from legorl.agents.base import ScaffoldLimits, SessionEndpoint
from legorl.agents.bridge import ExecBridge, clip
from legorl.agents.bridge_env import BridgeEnvironment, BridgeError
from legorl.agents.bridge_net import HostRelay
from legorl.agents.bridge_sandbox import CliRun, relay_base_url, run_cli_in_sandbox
from legorl.agents.claude_code import ClaudeCode, parse_stream
from legorl.agents.cli import register
from legorl.agents.install import stage_readable
from legorl.agents.opencode import opencode_config
from legorl.agents.openhands import OpenHands, OpenHandsUnavailableError
from legorl.env.base import ExecResult, SandboxError
from legorl.env.local import LocalSandbox
from legorl.tasks.model import Task, TaskLimits

ENDPOINT = SessionEndpoint("http://127.0.0.1:5/sess/SECRET/v1", "http://127.0.0.1:5/sess/SECRET", model="pol")


@pytest.fixture
async def sandbox(tmp_path: Path):
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    sb = LocalSandbox(Task(id="u", path=root, instruction="x", limits=TaskLimits(memory_mb=512)),
                      root_dir=Path("/tmp") / f"legorl-test-{uuid.uuid4().hex[:8]}")
    await sb.start()
    yield sb
    await sb.stop()
    shutil.rmtree(sb.root_dir, ignore_errors=True)


def _client(socket_path: str, token: str, monkeypatch) -> BridgeEnvironment:
    monkeypatch.setenv("LEGORL_BRIDGE_SOCKET", socket_path)
    monkeypatch.setenv("LEGORL_BRIDGE_TOKEN", token)
    # minisweagent is imported on first use: keep its config dir and banner out of the user's home
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(Path(socket_path).parent / "mswea"))
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    return BridgeEnvironment(timeout=5)


async def test_bridge_runs_in_the_sandbox_and_checks_its_token(sandbox, monkeypatch):
    async with ExecBridge(sandbox, command_timeout=5) as bridge:
        bridge_dir = Path(bridge.socket_path).parent
        assert stat.S_IMODE(bridge_dir.stat().st_mode) == 0o700
        env = _client(bridge.socket_path, bridge.token, monkeypatch)
        out = await asyncio.to_thread(env.execute, {"command": "echo out; echo err >&2; hostname; exit 3"})
        assert out["returncode"] == 3 and out["output"] == "out\nerr\nsandbox\n"  # stderr merged, in order
        assert (await asyncio.to_thread(env.get_template_vars))["node"] == "sandbox"
        slow = await asyncio.to_thread(env.execute, {"command": "sleep 10"}, timeout=1)
        assert slow["returncode"] == 124 and "timed out" in slow["exception_info"]
        forged = _client(bridge.socket_path, "not-the-token", monkeypatch)
        bad = await asyncio.to_thread(forged.execute, {"command": "touch /app/forged"})
        assert bad["returncode"] == -1 and "bad token" in bad["exception_info"]
        assert bridge.calls == 2  # the forged call never reached the sandbox
    assert not bridge_dir.exists()


async def test_bridge_submit_marker_raises_submitted(sandbox, monkeypatch):
    from minisweagent.exceptions import Submitted

    async with ExecBridge(sandbox) as bridge:
        env = _client(bridge.socket_path, bridge.token, monkeypatch)
        with pytest.raises(Submitted):
            await asyncio.to_thread(env.execute, {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo patch"})


def test_bridge_env_needs_its_socket(monkeypatch):
    monkeypatch.delenv("LEGORL_BRIDGE_SOCKET", raising=False)
    with pytest.raises(BridgeError, match="LEGORL_BRIDGE_SOCKET"):
        BridgeEnvironment()


def test_clip_keeps_head_and_tail():
    text = "a" * 50 + "b" * 50
    out = clip(text, 20)
    assert out.startswith("a" * 10) and out.endswith("b" * 10) and "80 characters elided" in out
    assert clip("short", 20) == "short"


async def test_host_relay_reaches_only_its_session():
    seen: list[str] = []

    async def target(request: web.Request) -> web.StreamResponse:
        seen.append(request.path_qs)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", target)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with HostRelay(f"http://127.0.0.1:{port}/sess/abc") as relay:
            assert stat.S_IMODE(os.stat(relay.socket_path).st_mode) == 0o666
            conn = aiohttp.UnixConnector(path=str(relay.socket_path))
            async with aiohttp.ClientSession(connector=conn) as http:
                async with http.post("http://x/v1/messages?beta=true", json={"a": 1}) as r:
                    body = await r.text()
                async with http.get("http://x/../../health") as r:
                    await r.read()
            # A raw request line that a client library would not normalize first.
            reader, writer = await asyncio.open_unix_connection(str(relay.socket_path))
            writer.write(b"GET /v1/../../../health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = await reader.read()
            writer.close()
            assert raw.startswith(b"HTTP/1.1 400")
        assert body == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert seen[0] == "/sess/abc/v1/messages?beta=true"
        assert all(p.startswith("/sess/abc/") for p in seen)
    finally:
        await runner.cleanup()


def test_stage_readable_exposes_a_private_install(tmp_path: Path):
    private = tmp_path / "home"
    (private / "pkg" / "bin").mkdir(parents=True)
    os.chmod(private, 0o700)
    (private / "pkg" / "package.json").write_text("{}")
    script = private / "pkg" / "bin" / "cli.js"
    script.write_text("#!/usr/bin/env node\n")
    script.chmod(0o700)
    elf = private / "agent"
    elf.write_bytes(b"\x7fELF" + b"\0" * 60)
    elf.chmod(0o755)
    dest, rel = stage_readable(elf, tmp_path / "stage")
    assert rel == "agent" and (dest / rel).stat().st_ino == elf.stat().st_ino  # hard link, no copy
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert stage_readable(elf, tmp_path / "stage") == (dest, rel)  # once per version
    dest2, rel2 = stage_readable(script, tmp_path / "stage")
    assert rel2 == "pkg/bin/cli.js" and (dest2 / "pkg" / "package.json").is_file()
    assert (dest2 / rel2).stat().st_mode & 0o005 == 0o005  # readable and runnable by the sandbox uid


async def test_in_sandbox_cli_needs_the_local_backend(tmp_path: Path):
    class OtherSandbox:
        async def exec(self, cmd: str, **kw: object) -> ExecResult:
            return ExecResult(0, "", "")

    with pytest.raises(SandboxError, match="local backend"):
        await run_cli_in_sandbox(OtherSandbox(), Path("/bin/true"), [], endpoint=ENDPOINT,  # type: ignore[arg-type]
                                 env={}, timeout=5, log_dir=tmp_path, log_name="x")


def test_claude_command_never_sees_the_session_url():
    limits = ScaffoldLimits(max_turns=7, max_tokens_per_call=99)
    cc = ClaudeCode()
    env, args = cc.environment(ENDPOINT, limits), cc.args("do it", ENDPOINT, limits)
    assert env["ANTHROPIC_BASE_URL"] == relay_base_url() and env["ANTHROPIC_MODEL"] == "pol"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "99" and args[args.index("--max-turns") + 1] == "7"
    assert "SECRET" not in json.dumps([env, args])


def _stream(*events: dict, rc: int = 0, timed_out: bool = False) -> CliRun:
    return CliRun(rc, timed_out, "\n".join(json.dumps(e) for e in events), "", 1.0, 3)


def test_claude_outcomes():
    ok = parse_stream(_stream({"type": "assistant", "message": {"content": [{"type": "tool_use"}]}},
                              {"type": "result", "subtype": "success", "num_turns": 2, "is_error": False}))
    assert (ok.exit_status, ok.turns, ok.metadata["tool_uses"]) == ("finished", 2, 1)
    assert parse_stream(_stream({"type": "result", "subtype": "error_max_turns"})).exit_status == "turn_limit"
    long = parse_stream(_stream({"type": "assistant", "error": "max_output_tokens", "message": {}},
                                {"type": "result", "subtype": "success", "is_error": True, "result": "API Error"}))
    assert long.exit_status == "finished"
    over = parse_stream(_stream({"type": "result", "subtype": "success", "is_error": True,
                                 "result": "API Error: prompt is too long: 9000 tokens > 8192 context window"}))
    assert over.exit_status == "context_overflow"
    crash = parse_stream(CliRun(1, False, "", "boom", 0.1, 0))
    assert crash.exit_status == "error" and "boom" in (crash.error or "")
    assert "time limit" in (parse_stream(_stream(rc=124, timed_out=True)).error or "")


def test_oom_is_named_with_its_fix():
    from legorl.agents.opencode import parse_events

    oom = CliRun(137, False, "", "", 1.0, 2, oom_killed=True)
    for result in (parse_stream(oom), parse_events(oom)):
        assert result.exit_status == "error" and "memory_mb" in (result.error or "")


def test_opencode_config_points_at_the_relay_only():
    cfg = opencode_config(ENDPOINT, ScaffoldLimits(max_turns=5, max_tokens_per_call=77), tools=("bash",))
    provider = cfg["provider"]["legorl"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == relay_base_url() + "/v1"
    assert provider["models"]["pol"]["limit"]["output"] == 77 and cfg["model"] == "legorl/pol"
    assert cfg["tools"]["bash"] is True and cfg["tools"]["webfetch"] is False
    assert cfg["permission"]["edit"] == "deny" and cfg["agent"]["build"]["steps"] == 5
    assert "SECRET" not in json.dumps(cfg)


async def test_openhands_says_it_needs_python_312(tmp_path: Path):
    oh = OpenHands(python="python3.11")
    cfg = oh.config(ENDPOINT, ScaffoldLimits())
    assert cfg["llm"]["base_url"] == ENDPOINT.openai_base_url and cfg["llm"]["model"] == "openai/pol"
    assert cfg["env"]["LLM_BASE_URL"] == ENDPOINT.openai_base_url
    with pytest.raises(OpenHandsUnavailableError, match=r"requires Python >= 3\.12"):
        await oh.run("x", None, ENDPOINT, ScaffoldLimits(), tmp_path)  # type: ignore[arg-type]
    assert json.loads((tmp_path / "openhands-config.json").read_text())["llm"]["model"] == "openai/pol"
    with pytest.raises(OpenHandsUnavailableError, match="not found"):
        OpenHands(python="/nonexistent/python").check()


def test_agents_cli(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    root = typer.Typer()

    @root.callback()
    def _main() -> None: ...

    register(root)
    runner = CliRunner()
    listed = runner.invoke(root, ["agents", "list"])
    assert listed.exit_code == 0 and "claude-code" in listed.output and "openhands" in listed.output
    bad = runner.invoke(root, ["agents", "install", "nope"])
    assert bad.exit_code == 2 and "unknown agent" in bad.output
    oh = runner.invoke(root, ["agents", "install", "openhands"])
    assert oh.exit_code == 1 and "Python >= 3.12" in oh.output
