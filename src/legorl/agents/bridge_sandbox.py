"""Running an agent CLI *inside* a trial's sandbox, with the proxy session as its only network peer.

Claude Code and OpenCode execute their tools in their own process, so the process itself must live in
the sandbox. The local backend's bwrap invocation gets two extra read-only binds for the run:
the relay directory at /run/legorl and, inside it, the staged agent at /run/legorl/agent. The agent's
mount point is a directory of our own relay dir, so it exists whatever the sandbox's system dirs are (a
layered trial binds the host's or image's /opt read-only, where bwrap cannot create /opt/legorl). The command is
`python3 /run/legorl/relay.py` (the namespace's init, see `bridge_relay`) which starts the agent.
Timeout or cancellation kill the namespace's init, and with it every process of the agent.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.agents.base import SessionEndpoint
from legorl.agents.bridge_net import HostRelay
from legorl.agents.install import stage_readable
from legorl.env.base import Sandbox, SandboxError

RELAY_MOUNT = "/run/legorl"
AGENT_MOUNT = f"{RELAY_MOUNT}/agent"  # a mount point inside the relay dir, made by us (see above)
RELAY_PORT = 8377  # inside the sandbox's own network namespace: no collision between trials
SYSTEM_PYTHON = "/usr/bin/python3"
OUTPUT_CAP = 16 << 20  # stream-json transcripts are long; the trial log keeps them whole up to this


@dataclass
class CliRun:
    exit_code: int
    timed_out: bool
    stdout: str
    stderr: str
    duration_s: float
    relay_requests: int
    oom_killed: bool = False
    refused_calls: int = 0  # model calls past `max_calls` that the relay refused

    def events(self) -> list[dict[str, Any]]:
        """The JSON objects the agent printed one per line (its event stream); other lines skipped."""
        out = []
        for line in self.stdout.splitlines():
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    out.append(event)
        return out


OOM_NOTE = ("was killed at the sandbox's memory limit: the agent process itself counts against the task's "
            "memory_mb (Claude Code and OpenCode need roughly 0.5-1 GB on top of the task; raise it for every task "
            "with sandbox.min_memory_mb)")


def relay_base_url() -> str:
    """The proxy session as the agent sees it from inside the sandbox."""
    return f"http://127.0.0.1:{RELAY_PORT}"


def _require_local(sandbox: Sandbox) -> None:
    if not (hasattr(sandbox, "run_argv") and hasattr(sandbox, "ro_binds")):
        raise SandboxError(
            f"{type(sandbox).__name__} cannot host an in-sandbox agent CLI yet: use the local backend "
            "(bubblewrap), or a scaffold whose commands go through Sandbox.exec (mini-swe-agent, builtin)"
        )


async def run_cli_in_sandbox(
    sandbox: Sandbox,
    binary: Path,
    args: list[str],
    *,
    endpoint: SessionEndpoint,
    env: dict[str, str],
    timeout: float,
    log_dir: Path,
    log_name: str,
    cwd: str | None = None,
    files: dict[str, str] | None = None,
    stage_tree: Path | None = None,
    max_calls: int | None = None,
    headers: dict[str, str] | None = None,
    interpreter: str | None = None,
) -> CliRun:
    """Runs `binary args...` as the sandbox user, reaching only `endpoint` at `relay_base_url()`.
    `files` (name -> text) appear read-only at /run/legorl/<name> (generated agent config);
    `stage_tree` is a directory around `binary` to mount with it (see `stage_readable`); `max_calls`
    bounds the model calls the relay lets through and `headers` are added to them (see `HostRelay`);
    `interpreter` runs a script `binary` (a path the sandbox sees: Qwen Code's node bundle needs node)."""
    _require_local(sandbox)
    staged, rel = stage_readable(binary, tree=stage_tree)
    binds: dict[str, Path] = sandbox.ro_binds  # type: ignore[attr-defined]
    async with HostRelay(endpoint.anthropic_base_url, max_calls=max_calls, headers=headers) as relay:
        (relay.dir / "agent").mkdir()
        (relay.dir / "agent").chmod(0o755)
        for name, text in (files or {}).items():
            (relay.dir / name).write_text(text)
            (relay.dir / name).chmod(0o644)
        binds[AGENT_MOUNT] = staged
        binds[RELAY_MOUNT] = relay.dir
        argv = [SYSTEM_PYTHON, f"{RELAY_MOUNT}/relay.py", f"{RELAY_MOUNT}/proxy.sock", str(RELAY_PORT), "--",
                *([interpreter] if interpreter else []), f"{AGENT_MOUNT}/{rel}", *args]
        try:
            out, oom = await sandbox.run_argv(  # type: ignore[attr-defined]
                argv, cwd=cwd, env=env, timeout=timeout, output_cap=OUTPUT_CAP, network=False
            )
        finally:
            for at in (AGENT_MOUNT, RELAY_MOUNT):
                binds.pop(at, None)
        requests, refused = relay.requests, relay.refused
    run = CliRun(
        exit_code=out.exit_code,
        timed_out=out.timed_out,
        stdout=out.stdout.decode("utf-8", errors="replace"),
        stderr=out.stderr.decode("utf-8", errors="replace"),
        duration_s=out.duration_s,
        relay_requests=requests,
        oom_killed=oom,
        refused_calls=refused,
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (log_dir / f"{log_name}.stdout").write_text(run.stdout)
        (log_dir / f"{log_name}.stderr").write_text(run.stderr)
    return run
