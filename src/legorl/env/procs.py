"""Spawning a sandboxed process: cgroup placement, rlimits and uid drop happen in the child before the
sandboxed program runs (a bash prologue, see `child_argv`).

Doing it in the child (not after spawn) closes the race where a fork bomb forks before it is moved
into its cgroup. A per-exec timeout kills the process group; bwrap's pid namespace then takes every
descendant with it (pid 1 of the namespace dies, the kernel kills the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import resource
import shlex
import signal
import struct
import subprocess
import termios
import time
from collections.abc import AsyncIterator, Callable, Collection
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
    netns: str | None = None  # join this network namespace first (root: nsenter), e.g. a trial's shared one


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
    if spec.netns:  # as root, before the uid drop: entering a namespace needs CAP_SYS_ADMIN over it
        prefix = ["nsenter", f"--net={spec.netns}", "--"]
    if spec.uid is not None and spec.gid is not None:
        prefix += ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.gid}", "--clear-groups", "--"]
    return ["/bin/bash", "--noprofile", "--norc", "-c", "\n".join(lines), "legorl-spawn", *prefix, *spec.argv]


def _children_from_task_files(pid: int) -> list[int] | None:
    """`pid`'s children as its threads' /proc children files list them ([] once `pid` is gone); None where
    the kernel has no such files (built without CONFIG_PROC_CHILDREN)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    try:
        for t in threads:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        pass
    return out


def _children_by_scan(pid: int) -> list[int]:
    """`pid`'s children found by reading every process's parent from /proc/<n>/stat (slower; any kernel)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{name}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(name))
    return out


def _children(pid: int) -> list[int]:
    found = _children_from_task_files(pid)
    return found if found is not None else _children_by_scan(pid)


def kill_namespace(pid: int) -> None:
    """Kills bwrap's namespace init (the kernel then kills every process in the namespace) and lets
    bwrap itself exit and be reaped normally; SIGKILLing bwrap first would orphan the init: it dies of
    --die-with-parent as a zombie of the host's pid 1, still under the trial's uid until that reaps it."""
    for child in _children(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


async def end_namespaces(live: Callable[[], Collection[int]], seconds: float) -> bool:
    """Kills the namespace init of each bwrap that `live()` lists, again every 10 ms (a bwrap that only just
    started has no init yet), until `live()` is empty (each bwrap reaped): True, or False after `seconds`.
    Waiting, rather than killing bwrap after a moment, keeps the inits from being orphaned (kill_namespace);
    seconds pass only on a loaded host."""
    deadline = time.monotonic() + seconds
    while pids := list(live()):
        if time.monotonic() >= deadline:
            return False
        for pid in pids:
            kill_namespace(pid)
        await asyncio.sleep(0.01)
    return True


STATUS_FD = "@@legorl-status-fd@@"  # argv placeholder for the status pipe's fd number (`run(status_fd=True)`)
DETACH_GRACE_S = 0.3  # how long output is still collected after the command ended, while leftovers hold the pipes
_DETACHED: set[asyncio.Future] = set()  # the drains of sandboxes that outlived their command (strong refs)
_DETACHED_PIDS: set[int] = set()


async def _read_status(fd: int) -> int | None:
    """The exit status the sandboxed side wrote on the pipe `fd`, or None when it closed without one."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
    try:
        line = await reader.readline()
    finally:
        transport.close()
    try:
        return int(line.strip())
    except ValueError:
        return None


def _unread(proc: asyncio.subprocess.Process, fd: int) -> int:
    """Bytes of the child's stdout/stderr not yet drained: in the pipe, plus in the StreamReader."""
    stream = proc.stdout if fd == 1 else proc.stderr
    transport = proc._transport.get_pipe_transport(fd) if proc._transport else None  # type: ignore[attr-defined]
    pipe = transport.get_extra_info("pipe") if transport is not None else None
    n = len(getattr(stream, "_buffer", b""))
    if pipe is not None:
        with contextlib.suppress(OSError, ValueError):
            n += struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    return n


async def _settle(proc: asyncio.subprocess.Process, drains: asyncio.Future) -> None:
    """After the command ended: returns once its output is read (nothing left in the pipes twice in a
    row), or the pipes closed, or DETACH_GRACE_S passed."""
    quiet = 0
    deadline = time.monotonic() + DETACH_GRACE_S
    while not drains.done() and time.monotonic() < deadline:
        quiet = quiet + 1 if _unread(proc, 1) == 0 and _unread(proc, 2) == 0 else 0
        if quiet >= 2:
            return
        await asyncio.sleep(0.005)


def _detach(finishing: asyncio.Future, pid: int, on_exit: Callable[[int], None] | None) -> None:
    """Keeps draining a sandbox whose command ended but whose leftovers live on; `on_exit` when it ends."""
    _DETACHED.add(finishing)
    _DETACHED_PIDS.add(pid)

    def done(f: asyncio.Future) -> None:
        _DETACHED.discard(f)
        _DETACHED_PIDS.discard(pid)
        if not f.cancelled():
            f.exception()  # retrieved: a closed pipe at kill time is expected
        if on_exit:
            on_exit(pid)

    finishing.add_done_callback(done)


async def run(
    spec: SpawnSpec,
    stdin: bytes | AsyncIterator[bytes] | None = None,
    timeout: float | None = None,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    on_spawn: Callable[[int], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
    status_fd: bool = False,
) -> RunOutput:
    """Runs one sandboxed command to completion or timeout; output is capped but always drained.

    With `status_fd`, `spec.argv` contains the placeholder STATUS_FD: it is replaced by the number of a
    pipe on which the sandboxed side writes the command's exit status when the command itself ends (see
    `legorl.env.persist`). The call returns then, even while processes the command left behind keep
    the sandbox (and its output pipes) alive: those are drained, unread, until they end or are killed,
    and `on_exit` is called when the sandbox process finally exits."""
    status_r = status_w = -1
    if status_fd:
        status_r, status_w = os.pipe()
        spec = SpawnSpec(**{**spec.__dict__, "argv": [str(status_w) if a == STATUS_FD else a for a in spec.argv]})
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
            pass_fds=(status_w,) if status_fd else (),
        )
    except (OSError, subprocess.SubprocessError) as e:
        if status_fd:
            os.close(status_r)
        raise SandboxError(f"cannot start the sandboxed process ({spec.argv[0]}): {e}") from e
    finally:
        if status_fd and status_w >= 0:
            with contextlib.suppress(OSError):
                os.close(status_w)
    if on_spawn:
        on_spawn(proc.pid)
    out, err = CappedBuffer(output_cap), CappedBuffer(output_cap)
    status: list[int] = []

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

    async def rest() -> None:
        await asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
        await proc.wait()

    async def body() -> None:
        feeder = asyncio.ensure_future(feed())
        try:
            if not status_fd:
                await rest()
            else:
                drains = asyncio.ensure_future(asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err)))
                exited = asyncio.ensure_future(proc.wait())
                try:
                    line = await _read_status(status_r)
                except BaseException:
                    drains.cancel()
                    exited.cancel()
                    raise
                if line is not None:
                    status.append(line)
                # The command's last output is in the pipes (leftovers may hold them open: then take what
                # came within the grace); its init exits at once unless leftovers still run.
                if status:  # bwrap, still up while leftovers run, holds the pipes: wait till they are read
                    await _settle(proc, drains)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exited), 0.05 if status else None)
                if not (drains.done() and exited.done()):
                    _detach(asyncio.ensure_future(asyncio.gather(drains, exited)), proc.pid, on_exit)
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
        if not await end_namespaces(lambda: [proc.pid] if proc.returncode is None else [], 10.0):
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
        if on_exit and proc.pid not in _DETACHED_PIDS:
            on_exit(proc.pid)
    if status and not timed_out:
        rc = status[0]
    else:
        if proc.returncode is None and proc.pid not in _DETACHED_PIDS:
            _kill_group(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if rc < 0:
            rc = 128 - rc  # killed by a signal: the shell convention (137 = SIGKILL)
    result = RunOutput(
        exit_code=124 if timed_out else rc,
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        duration_s=time.monotonic() - t0,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )
    if proc.pid in _DETACHED_PIDS:  # leftovers' later output is read only to keep their pipes open
        out.discard()
        err.discard()
    return result
