"""The builtin scaffold's actions: tool schemas, their implementation on `Sandbox.exec`, and the
text protocol (one fenced bash block) for models that answer in prose instead of tool calls.

Everything runs through `sandbox.exec`, so the tools work on every backend; file edits go through
base64 so no content is ever interpreted by a shell.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from legorl.env.base import ExecResult, Sandbox


def _fn(name: str, desc: str, props: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in props}, "required": props}}}


# Terse on purpose: with templates lacking native tools the proxy writes these into the system prompt.
TOOLS: list[dict[str, Any]] = [
    _fn("bash", "Run a shell command.", ["command"]),
    _fn("view", "Show a file with line numbers, or list a directory.", ["path"]),
    _fn("create", "Write a file (replaces it).", ["path", "content"]),
    _fn("str_replace", "Replace text that occurs exactly once in a file.", ["path", "old", "new"]),
    _fn("submit", "Finish: the task is done.", []),
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}


def tool_schemas(tools: bool | list[str]) -> list[dict[str, Any]]:
    """The schemas a scaffold offers: all (True), none (False: the text protocol), or the named ones (a
    small model reads a two-tool preamble more easily than five)."""
    if isinstance(tools, bool):
        return list(TOOLS) if tools else []
    unknown = [n for n in tools if n not in TOOL_NAMES]
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}: the builtin tools are {', '.join(sorted(TOOL_NAMES))}")
    by_name = {t["function"]["name"]: t for t in TOOLS}
    return [by_name[n] for n in tools]


def example_messages(example: list[Any], index: int) -> list[dict[str, Any]]:
    """One few-shot example as chat messages. Strings alternate user / assistant; dicts are OpenAI
    messages, where an assistant's `tool_calls` may omit `id`/`type` and give `arguments` as a table,
    and a `tool` message may omit `tool_call_id` (it answers the next unanswered call): a multi-turn
    example with real tool calls stays short enough to write in a TOML config."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for j, m in enumerate(example):
        if isinstance(m, str):
            out.append({"role": "user" if j % 2 == 0 else "assistant", "content": m})
            continue
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"example {index}, message {j}: a string or a message with a role, got {m!r}")
        msg = {"content": "", **m}
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            calls = []
            for k, c in enumerate(msg["tool_calls"]):
                fn = dict(c.get("function") or {})
                args = fn.get("arguments", {})
                fn["arguments"] = args if isinstance(args, str) else json.dumps(args)
                calls.append({"id": c.get("id") or f"example{index}_{j}_{k}", "type": "function", "function": fn})
            msg["tool_calls"] = calls
            pending += [c["id"] for c in calls]
        elif msg["role"] == "tool" and not msg.get("tool_call_id"):
            if not pending:
                raise ValueError(f"example {index}, message {j}: a tool message with no call to answer")
            msg["tool_call_id"] = pending[0]
        if msg["role"] == "tool" and msg["tool_call_id"] in pending:
            pending.remove(msg["tool_call_id"])
        out.append(msg)
    return out

_STR_REPLACE = (
    "import base64,json,sys\n"
    "a=json.loads(base64.b64decode(sys.argv[1]))\n"
    "s=open(a['path'],encoding='utf-8').read()\n"
    "n=s.count(a['old'])\n"
    "if not a['old'] or n!=1:\n"
    " print('error: the old text occurs %d times in %s (need exactly 1)'%(n,a['path']));sys.exit(1)\n"
    "open(a['path'],'w',encoding='utf-8').write(s.replace(a['old'],a['new'],1))\n"
    "print('ok: replaced 1 occurrence in '+a['path'])\n"
)


def truncate(text: str, limit: int) -> str:
    """Head and tail of `text` with a marker saying how much was cut (the model sees both ends)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters truncated ...]\n{text[-tail:] if tail else ''}"


def format_exec(res: ExecResult, limit: int, timeout: float) -> str:
    body = res.stdout + (res.stderr if not res.stderr or not res.stdout else "\n" + res.stderr)
    body = truncate(body.strip("\n"), limit) if body.strip() else "(no output)"
    note = f"[command timed out after {timeout:.0f}s and was killed]\n" if res.timed_out else ""
    return f"{note}exit code: {res.exit_code}\n{body}"


@dataclass
class Action:
    """What one model reply asks for: a tool by name with arguments, or nothing."""

    tool: str
    args: dict[str, Any]
    call_id: str | None = None  # set for native tool calls (the answer goes in a `tool` message)


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}
_DONE = re.compile(r"\b(done|complete|completed|finished|solved)\b", re.IGNORECASE)


def clean_command(block: str) -> str:
    """Drop what cannot work in the sandbox but small models write anyway: `$ ` prompts, `sudo`."""
    lines = []
    for line in block.strip("\n").splitlines():
        s = line
        if s.startswith("$ "):
            s = s[2:]
        s = re.sub(r"^(\s*)sudo\s+(-\S+\s+)*", r"\1", s)
        lines.append(s)
    return "\n".join(lines).strip()


def text_action(content: str | None) -> Action | None:
    """The text protocol: the first fenced shell block is run whole; a block of just `submit` submits."""
    for m in _FENCE.finditer(content or ""):
        if m.group(1).lower() not in _SHELL_LANGS:
            continue
        cmd = clean_command(m.group(2))
        if not cmd:
            continue
        if cmd.strip() == "submit":
            return Action("submit", {})
        return Action("bash", {"command": cmd})
    return None


def says_done(content: str | None) -> bool:
    return bool(_DONE.search(content or ""))


def parse_arguments(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    val = json.loads(raw)
    if not isinstance(val, dict):
        raise ValueError("arguments must be a JSON object")
    return val


async def run_action(action: Action, sandbox: Sandbox, timeout: float, limit: int) -> str:
    """Execute one tool and return the observation text for the model."""
    a = action.args
    if action.tool == "bash":
        cmd = a.get("command", a.get("cmd"))
        if not isinstance(cmd, str) or not cmd.strip():
            return "error: bash needs a non-empty 'command' string"
        return format_exec(await sandbox.exec(cmd, timeout=timeout), limit, timeout)
    path = a.get("path")
    if not isinstance(path, str) or not path:
        return f"error: {action.tool} needs a 'path' string"
    q = shlex.quote(path)
    if action.tool == "view":
        cmd = f"if [ -d {q} ]; then ls -la {q}; else cat -n -- {q}; fi"
        return format_exec(await sandbox.exec(cmd, timeout=timeout), limit, timeout)
    if action.tool == "create":
        content = a.get("content", "")
        if not isinstance(content, str):
            return "error: create needs a 'content' string"
        b64 = base64.b64encode(content.encode()).decode()
        cmd = f'mkdir -p "$(dirname -- {q})" && printf %s {b64} | base64 -d > {q} && echo "wrote {len(content)} chars"'
        return format_exec(await sandbox.exec(cmd, timeout=timeout), limit, timeout)
    if action.tool == "str_replace":
        old, new = a.get("old", a.get("old_str")), a.get("new", a.get("new_str", ""))
        if not isinstance(old, str) or not isinstance(new, str):
            return "error: str_replace needs 'old' and 'new' strings"
        payload = base64.b64encode(json.dumps({"path": path, "old": old, "new": new}).encode()).decode()
        cmd = f"python3 -c {shlex.quote(_STR_REPLACE)} {payload}"
        return format_exec(await sandbox.exec(cmd, timeout=timeout), limit, timeout)
    return f"error: unknown tool {action.tool!r}; use one of {', '.join(sorted(TOOL_NAMES))}"
