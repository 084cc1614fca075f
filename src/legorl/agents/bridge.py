"""Exec bridge: serves one trial's Sandbox to an agent CLI that runs as a host process.

An external agent (mini-swe-agent) decides *what* to run; the sandbox decides *where*. The bridge is
a unix socket in a private 0700 directory, guarded by an unguessable token, that accepts one JSON
request per connection (`{"token", "op": "exec" | "info", ...}`) and answers one JSON line. The
agent-side client is `legorl.agents.bridge_env`; it needs nothing from legorl but the socket path.

Also here: `run_host_process`, which runs such a CLI so that it never outlives the trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.env.base import Sandbox

TOKEN_ENV = "LEGORL_BRIDGE_TOKEN"
SOCKET_ENV = "LEGORL_BRIDGE_SOCKET"
MAX_REQUEST_BYTES = 4 << 20


def clip(text: str, limit: int) -> str:
    """Head and tail of a long output (errors tend to come last), with the elision said in words."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters elided ...]\n{text[-tail:]}"


class ExecBridge:
    """`async with ExecBridge(sandbox) as b:` then hand `b.socket_path` and `b.token` to the agent."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        command_timeout: float = 60.0,
        max_output_chars: int = 0,
        default_env: dict[str, str] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.command_timeout = command_timeout
        self.max_output_chars = max_output_chars
        self.default_env = dict(default_env or {})
        self.token = secrets.token_urlsafe(32)
        self.calls = 0
        self.commands: list[dict[str, Any]] = []  # what ran, for the trial's log
        self._dir: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._info: dict[str, str] | None = None

    @property
    def socket_path(self) -> str:
        assert self._dir is not None, "bridge not started"
        return str(self._dir / "exec.sock")

    async def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="legorl-bridge-"))
        os.chmod(self._dir, 0o700)  # only the host user that runs the agent can reach the socket
        self._server = await asyncio.start_unix_server(self._handle, path=self.socket_path, limit=MAX_REQUEST_BYTES)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def __aenter__(self) -> ExecBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("request is not an object")
            except ValueError as exc:
                reply: dict[str, Any] = {"error": f"bad request: {exc}"}
            else:
                if not hmac.compare_digest(str(req.get("token", "")), self.token):
                    reply = {"error": "bad token"}
                else:
                    reply = await self._dispatch(req)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "info":
            return await self.info()
        if op == "exec":
            return await self.execute(
                str(req.get("command", "")),
                cwd=req.get("cwd") or None,
                env=req.get("env") or None,
                timeout=req.get("timeout"),
            )
        return {"error": f"unknown op {op!r}"}

    async def execute(
        self, command: str, cwd: str | None = None, env: dict[str, str] | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Runs one command in the sandbox; stderr is merged into stdout in order, as a terminal shows it."""
        self.calls += 1
        t = float(timeout) if timeout else self.command_timeout
        t0 = time.monotonic()
        try:
            r = await self.sandbox.exec("exec 2>&1\n" + command, cwd=cwd, env={**self.default_env, **(env or {})},
                                        timeout=t)
        except Exception as exc:  # a broken sandbox is the agent's observation, not the bridge's crash
            reply = {"output": "", "returncode": -1, "exception_info": f"sandbox error: {exc}"}
        else:
            output = clip(r.stdout + r.stderr, self.max_output_chars)
            info = f"the command timed out after {t:g} s and was killed" if r.timed_out else ""
            if r.oom_killed:
                info = (info + "; " if info else "") + "a process was killed at the memory limit"
            reply = {"output": output, "returncode": r.exit_code, "exception_info": info}
        self.commands.append({"command": command, "returncode": reply["returncode"],
                              "duration_s": round(time.monotonic() - t0, 3)})
        return reply

    async def info(self) -> dict[str, str]:
        """The sandbox's own uname, so the agent's prompt describes the machine its commands run on."""
        if self._info is None:
            r = await self.sandbox.exec("uname -s; uname -n; uname -r; uname -v; uname -m", timeout=10)
            vals = r.stdout.splitlines() + [""] * 5
            keys = ("system", "node", "release", "version", "machine")
            self._info = dict(zip(keys, vals[:5], strict=True))
        return dict(self._info)


@dataclass
class HostRun:
    exit_code: int
    timed_out: bool
    duration_s: float


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_host_process(
    argv: list[str], *, env: dict[str, str], cwd: Path, log_path: Path, timeout: float
) -> HostRun:
    """Runs an agent CLI in its own process group with output to `log_path`; on timeout or
    cancellation the whole group is killed, so no agent process outlives its trial."""
    t0 = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=cwd,
            start_new_session=True,
        )
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        # Even after a clean exit: a child the agent left in its group must not survive it.
        _kill_group(proc.pid)
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(proc.wait()), 5)
    rc = proc.returncode if proc.returncode is not None else 137
    return HostRun(exit_code=124 if timed_out else rc, timed_out=timed_out, duration_s=time.monotonic() - t0)
