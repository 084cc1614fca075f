"""The builtin scaffold's pieces: the text protocol, output truncation, and its tools on a real sandbox."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from legorl.agents import base
from legorl.agents.builtin_tools import (
    TOOLS,
    Action,
    example_messages,
    run_action,
    says_done,
    text_action,
    tool_schemas,
    truncate,
)
from legorl.env import make_sandbox
from legorl.tasks.model import Task, TaskLimits


def test_registered_names():
    for name in ("builtin", "oracle", "nop"):
        assert name in base.SCAFFOLDS
    assert type(base.load_scaffold("builtin")).__name__ == "BuiltinScaffold"
    assert {t["function"]["name"] for t in TOOLS} == {"bash", "view", "create", "str_replace", "submit"}


def test_tool_subsets():
    assert tool_schemas(True) == TOOLS and tool_schemas(False) == []
    assert [t["function"]["name"] for t in tool_schemas(["submit", "bash"])] == ["submit", "bash"]
    with pytest.raises(ValueError, match="unknown tool"):
        tool_schemas(["bash", "python"])
    assert [t["function"]["name"] for t in base.load_scaffold("builtin", tools=["bash", "submit"]).tools] == [
        "bash", "submit"]


def test_examples_as_pairs_and_as_tool_conversations():
    assert example_messages(["task", "```bash\nls\n```"], 0) == [
        {"role": "user", "content": "task"}, {"role": "assistant", "content": "```bash\nls\n```"}]
    msgs = example_messages([
        {"role": "user", "content": "Do what /app/TODO says."},
        {"role": "assistant", "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "cat TODO"}}}]},
        {"role": "tool", "content": "exit code: 0\nmake dir x"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c9", "function": {"name": "submit"}}]},
        {"role": "tool", "content": "submitted"},
    ], 3)
    call = msgs[1]["tool_calls"][0]
    assert call == {"id": "example3_1_0", "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "cat TODO"}'}}
    assert msgs[1]["content"] == "" and msgs[2]["tool_call_id"] == "example3_1_0"
    assert msgs[3]["tool_calls"][0]["function"]["arguments"] == "{}" and msgs[4]["tool_call_id"] == "c9"
    with pytest.raises(ValueError, match="no call to answer"):
        example_messages([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}], 0)
    with pytest.raises(ValueError, match="message 0"):
        example_messages([{"content": "no role"}], 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Sure:\n```bash\nls -la\n```\nthen more", Action("bash", {"command": "ls -la"})),
        ("```sh\n$ sudo -n mkdir x\necho ok\n```", Action("bash", {"command": "mkdir x\necho ok"})),
        ("```\ncat a.txt\n```", Action("bash", {"command": "cat a.txt"})),
        ("```python\nprint(1)\n```\n```bash\necho 2\n```", Action("bash", {"command": "echo 2"})),
        ("```bash\n#!/bin/bash\necho hi", Action("bash", {"command": "#!/bin/bash\necho hi"})),  # cut off
        ("All good.\n```bash\nsubmit\n```", Action("submit", {})),
        ("I would run ls.", None),
        ("```python\nprint(1)\n```", None),
        ("```bash\n\n```", None),
    ],
)
def test_text_protocol(text, expected):
    assert text_action(text) == expected


def test_done_words_and_truncation():
    assert says_done("The task is complete.") and says_done("DONE") and not says_done("I am undone-ish? no")
    out = truncate("a" * 100 + "b" * 100, 50)
    assert out.startswith("a" * 33) and out.endswith("b" * 17) and "150 characters truncated" in out
    assert truncate("short", 50) == "short"


@pytest.fixture
async def sandbox(tmp_path):
    env = tmp_path / "t" / "environment"
    env.mkdir(parents=True)
    (env / "notes.txt").write_text("alpha\nbeta\nbeta\n")
    task = Task(id="t", path=tmp_path / "t", instruction="x", limits=TaskLimits(memory_mb=512))
    root = Path("/tmp") / f"legorl-btest-{uuid.uuid4().hex[:8]}"
    sb = make_sandbox(task, root_dir=root)
    await sb.start()
    yield sb
    await sb.stop()
    shutil.rmtree(root, ignore_errors=True)


async def test_tools_on_a_real_sandbox(sandbox):
    run = lambda tool, **a: run_action(Action(tool, a), sandbox, 5.0, 400)  # noqa: E731
    weird = "quote ' \" $HOME `x` \\n\nline2 ünï\n"
    assert "wrote" in await run("create", path="/app/sub/w.txt", content=weird)
    assert (await sandbox.exec("cat /app/sub/w.txt")).stdout == weird
    view = await run("view", path="/app/notes.txt")
    assert "exit code: 0" in view and "1\talpha" in view
    assert "sub" in await run("view", path="/app")
    assert "exactly 1" in await run("str_replace", path="/app/notes.txt", old="beta", new="gamma")
    assert "ok: replaced" in await run("str_replace", path="/app/notes.txt", old="alpha", new="ALPHA")
    assert (await sandbox.exec("cat /app/notes.txt")).stdout == "ALPHA\nbeta\nbeta\n"
    out = await run("bash", command="seq 1 1000")
    assert "characters truncated" in out and out.rstrip().endswith("1000")
    out = await run_action(Action("bash", {"command": "sleep 30"}), sandbox, 0.5, 400)
    assert "timed out" in out
    assert "exit code: 3" in await run("bash", command="echo err >&2; exit 3")
    assert "error" in await run("bash") and "unknown tool" in await run("rm_rf", path="/")


async def test_the_run_configs_command_timeout_kills_an_interactive_command(sandbox):
    """`agent.command_timeout_sec` reaches the scaffold's limits and kills a command that would not end (as an
    interactive `vim` did in the demo, holding its whole step for the 60 s default)."""
    import time

    from legorl.config import RunConfig
    from legorl.workers.config import worker_config

    limits = worker_config(RunConfig.model_validate({"agent": {"command_timeout_sec": 1}})).limits
    assert limits.command_timeout_sec == 1
    t0 = time.monotonic()
    out = await run_action(Action("bash", {"command": "sleep 30; echo never"}), sandbox, limits.command_timeout_sec,
                           limits.max_output_chars)
    assert time.monotonic() - t0 < 10 and "timed out after 1s" in out and "never" not in out
