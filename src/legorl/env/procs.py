"""Spawning a sandboxed process: cgroup placement, rlimits and uid drop happen in the child before the
sandboxed program runs (a bash prologue, see `child_argv`).

Doing it in the child (not after spawn) closes the race where a fork bomb forks before it is moved
into its cgroup. A per-exec timeout kills the process group; bwrap's pid namespace then takes every
descendant with it (pid 1 of the namespace dies, the kernel kills the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shlex
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from legorl.env.base import SandboxError
from legorl.env.output import DEFAULT_OUTPUT_CAP, CappedBuffer, drain

# Only these reach bwrap itself; the sandboxed command gets its own clean env via --setenv.
_HOST_ENV_KEYS = ("PATH", "LANG")


@dataclass
class Rlimits:
    """Per-process limits (None = leave as inherited). Hard = soft so the sandbox cannot raise them."""

    cpu_s: int | None = 3600
    address_space_mb: int | None = None
    file_size_mb: int | None = 4096
    nofile: int | None = 4096
    nproc: int | None = 1024

    def pairs(self) -> list[tuple[int, int]]:
        mb = 1024 * 1024
        out = []
        for res, val in (
            (resource.RLIMIT_CPU, self.cpu_s),
            (resource.RLIMIT_AS, self.address_space_mb and self.address_space_mb * mb),
            (resource.RLIMIT_FSIZE, self.file_size_mb and self.file_size_mb * mb),
            (resource.RLIMIT_NOFILE, self.nofile),
            (resource.RLIMIT_NPROC, self.nproc),
        ):
            if val:
                _soft, hard = resource.getrlimit(res)
                val = val if hard == resource.RLIM_INFINITY else min(val, hard)
                out.append((res, val))
        return out


@dataclass
class SpawnSpec:
    argv: list[str]
    cgroup_procs: list[Path] = field(default_factory=list)
    rlimits: Rlimits = field(default_factory=Rlimits)
    uid: int | None = None  # drop to this uid (and gid) when running as root
    gid: int | None = None


@dataclass
class RunOutput:
    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool
    truncated: bool


# bash's ulimit flag and unit for each limit (values in bytes are given in KiB)
_ULIMIT = {resource.RLIMIT_CPU: ("-t", 1), resource.RLIMIT_AS: ("-v", 1024), resource.RLIMIT_FSIZE: ("-f", 1024),
           resource.RLIMIT_NOFILE: ("-n", 1), resource.RLIMIT_NPROC: ("-u", 1)}


def child_argv(spec: SpawnSpec) -> list[str]:
    """The command behind a small bash prologue that joins the cgroups, sets the rlimits and execs it
    (through `setpriv` when dropping to the trial uid), all before the sandboxed program runs.

    Not a `preexec_fn`: with one, Python must fork() this whole process (a few GB once a model, its KV
    pool and an optimizer are loaded: 0.2-0.5 s of page-table copying per spawn, on the event loop, and
    copy-on-write faults after it); without one it uses vfork, ~2 ms."""
    lines = []
    for path in spec.cgroup_procs:
        if not os.access(path, os.W_OK):
            raise SandboxError(f"cannot join the trial's cgroup: {path} is not writable")
        lines.append(f"printf 0 > {shlex.quote(str(path))} || exit 125")  # "0" = this shell
    for res, val in spec.rlimits.pairs():
        flag, unit = _ULIMIT[res]
        lines.append(f"ulimit -H -S {flag} {val // unit} || exit 125")
    lines.append('exec "$@"')
    prefix: list[str] = []
    if spec.uid is not None and spec.gid is not None:
        prefix = ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.gid}", "--clear-groups", "--"]
    return ["/bin/bash", "--noprofile", "--norc", "-c", "\n".join(lines), "legorl-spawn", *prefix, *spec.argv]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def kill_namespace(pid: int) -> None:
    """Kills bwrap's namespace init (the kernel then kills every process in the namespace) and lets
    bwrap itself exit and be reaped normally; SIGKILLing bwrap first would orphan the init as a zombie."""
    for child in _children(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


async def run(
    spec: SpawnSpec,
    stdin: bytes | AsyncIterator[bytes] | None = None,
    timeout: float | None = None,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    on_spawn: Callable[[int], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> RunOutput:
    """Runs one sandboxed command to completion or timeout; output is capped but always drained."""
    argv = child_argv(spec)
    host_env = {k: os.environ[k] for k in _HOST_ENV_KEYS if k in os.environ}
    t0 = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env=host_env,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"cannot start the sandboxed process ({spec.argv[0]}): {e}") from e
    if on_spawn:
        on_spawn(proc.pid)
    out, err = CappedBuffer(output_cap), CappedBuffer(output_cap)

    async def feed() -> None:
        if stdin is None or proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if isinstance(stdin, bytes | bytearray):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            else:
                async for chunk in stdin:  # streamed input: ends when the source or the process does
                    proc.stdin.write(chunk)
                    await proc.stdin.drain()
        proc.stdin.close()

    async def body() -> None:
        feeder = asyncio.ensure_future(feed())
        try:
            await asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
            await proc.wait()
        finally:
            if not feeder.done():
                feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)

    task = asyncio.ensure_future(body())
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout)
    except TimeoutError:
        timed_out = True
        kill_namespace(proc.pid)
        try:
            await asyncio.wait_for(asyncio.shield(task), 2)
        except TimeoutError:
            _kill_group(proc.pid)  # bwrap did not exit with its namespace: take the whole group
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except TimeoutError:
            task.cancel()  # something still holds the pipes: give up on the rest of the output
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    except asyncio.CancelledError:
        kill_namespace(proc.pid)
        _kill_group(proc.pid)
        task.cancel()
        raise
    finally:
        if on_exit:
            on_exit(proc.pid)
    if proc.returncode is None:
        _kill_group(proc.pid)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5)
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if rc < 0:
        rc = 128 - rc  # killed by a signal: the shell convention (137 = SIGKILL)
    return RunOutput(
        exit_code=124 if timed_out else rc,
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        duration_s=time.monotonic() - t0,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )
