"""Processes that live as long as the trial, not as long as the exec that started them (local backend).

Harbor runs a trial in one container: a server that the agent, or the image's ENTRYPOINT, starts in the
background is still there when the next command, the healthcheck or test.sh talks to it. Each local
exec is its own bubblewrap call, so two things make that hold here:
- each exec's pid 1 is `INIT`, not the command: it writes the command's exit status on a pipe (the
  exec returns then: `procs.run(status_fd=True)`) and stays on, reaping, while anything the command
  left behind still runs. `LocalSandbox.quiesce()` / `stop()` kill every exec's namespace, so nothing
  outlives the trial.
- every exec joins one network namespace per trial (`SharedNet`: a sleeping root process holds it), so
  loopback is shared and `curl localhost:8000` in test.sh reaches the agent's server. Joining needs
  root (nsenter before the uid drop); without root each exec keeps its own loopback (in the notes).
Each exec keeps its own pid namespace: the verifier's processes are invisible to the agent's leftovers
(no /proc/<pid>/root into the verifier's mounts, no signals, no ptrace), which is what lets them live
through verification (see `LocalSandbox.enter_phase` for the paths the verifier gets fresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys

from legorl.env import procs

# $1: the status pipe's fd (moved to 8); the rest: the command. Its stdin is the exec's (fd 9 carries it
# past the shell's /dev/null default for background jobs). After the status, the init closes its own
# copies of the exec's pipes, so only leftovers can still hold them, and polls /proc (its namespace's
# own) until it is the last process there; `wait` reaps every child, orphans included. bash, not sh:
# dash cannot name an fd above 9.
INIT = r"""[ "$1" = 8 ] || eval "exec 8>&$1 $1>&-"
shift
exec 9<&0
"$@" <&9 9<&- 8>&- &
wait $!
rc=$?
printf '%s\n' "$rc" >&8
exec 8>&- 9<&- 0</dev/null 1>/dev/null 2>/dev/null
while :; do
  set -- /proc/[0-9]*
  [ "$#" -le 1 ] && exit "$rc"
  sleep 1 & wait $!
done
"""

def init_argv(argv: list[str]) -> list[str]:
    """`argv` under INIT (the exec's pid 1); the placeholder becomes the status fd in `procs.run`."""
    return ["/bin/bash", "--noprofile", "--norc", "-c", INIT, "legorl-init", procs.STATUS_FD, *argv]


# Run by root on the host (`python3 -I -S -c`): a new network namespace with loopback up, then sleep.
# It dies with its parent (PDEATHSIG), so a killed trainer leaves none behind. Owned by the host's
# user namespace, so a sandboxed process (in its own user namespace) cannot reconfigure it.
_HOLDER = r"""
import ctypes, fcntl, os, signal, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL)
if libc.unshare(0x40000000) != 0:
    sys.exit("unshare(net): " + os.strerror(ctypes.get_errno()))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, struct.pack("16sH14s", b"lo", 0, b"")))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))
s.close()
print("ready", flush=True)
while True:
    signal.pause()
"""


def _holder_argv() -> list[str]:
    """util-linux + iproute2 where the host has them (one exec chain, ~30 ms), else the Python holder."""
    tools = [shutil.which(t) for t in ("setpriv", "unshare", "ip", "sleep")]
    if all(tools):
        setpriv, unshare, ip, sleep = tools
        return [setpriv, "--pdeathsig", "KILL", unshare, "--net", "--", "/bin/sh", "-c",
                f"{ip} link set lo up && echo ready && exec {sleep} infinity"]
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    return [python, "-I", "-S", "-c", _HOLDER]


class SharedNet:
    """One network namespace (loopback only) that every exec of a trial joins; root only."""

    def __init__(self) -> None:
        self.path: str | None = None  # /proc/<holder>/ns/net while held
        self.proc: asyncio.subprocess.Process | None = None
        self.error = ""

    async def start(self) -> str | None:
        """Starts the holder; returns its namespace path, or None where joining is not possible."""
        if os.geteuid() != 0:
            self.error = "needs root"
            return None
        self.proc = await asyncio.create_subprocess_exec(
            *_holder_argv(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            err = (await self.proc.stderr.read()).decode(errors="replace") if self.proc.returncode else ""
            self.error = err.strip().splitlines()[-1] if err.strip() else "the holder did not start"
            await self.stop()
            return None
        self.path = f"/proc/{self.proc.pid}/ns/net"
        return self.path

    def alive(self) -> bool:
        return self.path is not None and self.proc is not None and self.proc.returncode is None

    async def stop(self) -> None:
        proc, self.proc, self.path = self.proc, None, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
