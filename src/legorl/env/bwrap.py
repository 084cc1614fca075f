"""bubblewrap command lines: the read-only host system plus Harbor's writable paths, nothing else.

Each `exec` is a fresh bwrap invocation over the same per-trial host directories: the state lives in
those directories, so mounting /tests or /solution later is just another bind on the next call.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from legorl.env.base import SandboxError

DEFAULT_BWRAP = "/usr/bin/bwrap"
SANDBOX_USER = "agent"
SANDBOX_HOME = "/home/agent"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TOP_LINKS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")


def check_bwrap(path: str) -> str:
    """Fails early and says how to fix a missing bubblewrap (the commonest setup error)."""
    p = Path(path)
    if not p.is_file() or not os.access(p, os.X_OK):
        raise SandboxError(
            f"bubblewrap not found at {path}: the local sandbox needs it. "
            "Install it with `apt-get install bubblewrap` (or pass bwrap=PATH), or use backend='docker'."
        )
    return str(p)


_FEATURES: dict[str, bool] = {}


def supports_disable_userns(bwrap: str) -> bool:
    """bubblewrap >= 0.8 can forbid nested user namespaces (a large kernel attack surface)."""
    if bwrap not in _FEATURES:
        try:
            out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _FEATURES[bwrap] = "--disable-userns" in out
    return _FEATURES[bwrap]


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean, predictable environment: nothing leaks in from the trainer's process."""
    env = {
        "PATH": BASE_PATH,
        "HOME": SANDBOX_HOME,
        "USER": SANDBOX_USER,
        "LOGNAME": SANDBOX_USER,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(extra or {})
    return env


def passwd_files(uid: int, gid: int, etc: Path = Path("/etc"), name: str = SANDBOX_USER) -> tuple[str, str]:
    """/etc/passwd and /etc/group that name the sandbox uid, so `whoami`, git and pip stay happy.

    `name` is the user a task asks for ([agent].user, a Dockerfile's USER): its entry, if the image
    has one, is replaced by one with the trial's uid, so the name works without its uid."""
    try:
        passwd = (etc / "passwd").read_text()
        group = (etc / "group").read_text()
    except OSError:
        passwd, group = Path("/etc/passwd").read_text(), Path("/etc/group").read_text()
    drop = {SANDBOX_USER, name}
    passwd = "".join(line + "\n" for line in passwd.splitlines()
                     if line.split(":")[0] not in drop and line.split(":")[2:3] != [str(uid)])
    group = "".join(line + "\n" for line in group.splitlines() if line.split(":")[0] not in drop)
    passwd += f"{name}:x:{uid}:{gid}:legorl sandbox:{SANDBOX_HOME}:/bin/bash\n"
    if not any(line.split(":")[2:3] == [str(gid)] for line in group.splitlines()):
        group += f"{name}:x:{gid}:\n"
    return passwd, group


@dataclass
class BwrapSpec:
    """What one invocation sees. `binds` are writable (sandbox path -> host dir), `ro_binds` read-only."""

    bwrap: str
    uid: int
    gid: int
    binds: dict[str, Path] = field(default_factory=dict)
    ro_binds: dict[str, Path] = field(default_factory=dict)
    network: bool = False
    hostname: str = "sandbox"
    system_ro: tuple[str, ...] = ("/usr", "/etc")
    extra_args: tuple[str, ...] = ()
    system_src: dict[str, Path] | None = None  # an image layer's system dirs (sandbox path -> source)

    def argv(self, cmd: list[str], cwd: str, env: dict[str, str]) -> list[str]:
        a = [self.bwrap, "--unshare-user", "--uid", str(self.uid), "--gid", str(self.gid)]
        # --as-pid-1: the command is the namespace's init. With bwrap's own init instead, bwrap exits
        # without reaping it, and every exec leaves a zombie that counts against RLIMIT_NPROC.
        a += ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.network:
            a.append("--unshare-net")
        if supports_disable_userns(self.bwrap):
            a.append("--disable-userns")
        a += ["--die-with-parent", "--new-session", "--hostname", self.hostname]
        sources = self.system_src or {d: Path(d) for d in self.system_ro}
        for d, src in sources.items():
            if src.exists():
                a += ["--ro-bind", str(src), d]
        for f in ("/etc/resolv.conf", "/etc/hosts") if self.system_src and self.network else ():
            if Path(f).is_file():  # the host's live files (a layer's /etc shows the disk's copies)
                a += ["--ro-bind", f, f]
        for name in _TOP_LINKS:
            host = Path("/") / name
            if host.is_symlink():
                a += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                a += ["--ro-bind", str(host), f"/{name}"]
        a += ["--proc", "/proc", "--dev", "/dev"]
        # Sorted so a parent mount (/app) is bound before a child inside it (/app/data).
        for dst in sorted(self.binds, key=lambda p: p.count("/")):
            a += ["--bind", str(self.binds[dst]), dst]
        for dst in sorted(self.ro_binds, key=lambda p: p.count("/")):
            a += ["--ro-bind", str(self.ro_binds[dst]), dst]
        a += list(self.extra_args)
        a += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
        for k, v in env.items():
            a += ["--setenv", k, v]
        a.append("--")
        return a + cmd
