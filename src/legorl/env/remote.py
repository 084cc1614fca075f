"""Shell snippets shared by the container backends (docker, kubernetes), whose APIs cannot kill an exec.

Each exec records its shell's pid in a file; on timeout a second exec kills that process tree through
/proc (works in any image with a POSIX sh). `quiesce` kills everything but the container's init before
verification, since there (unlike the local backend) processes outlive the exec that started them.
"""

from __future__ import annotations

import uuid

# $1 = command, $2 = pid file. `sh` stays the parent so its pid names the whole tree.
WRAP = 'echo $$ > "$2"; bash -c "$1"; rc=$?; rm -f "$2"; exit $rc'
KILL_TREE = (
    'k() { for c in $(cat /proc/$1/task/*/children 2>/dev/null); do k "$c"; done; kill -9 "$1" 2>/dev/null; }; '
    'p=$(cat "$1" 2>/dev/null) && k "$p"; rm -f "$1"; true'
)
QUIESCE = "kill -9 -1 2>/dev/null; true"  # every process but init and this shell (run as root)


def wrapped(cmd: str) -> tuple[list[str], str]:
    """argv that runs `cmd` under bash with a pid file, and that pid file's path."""
    pidfile = f"/tmp/.legorl-exec-{uuid.uuid4().hex[:12]}"
    return ["/bin/sh", "-c", WRAP, "legorl", cmd, pidfile], pidfile


def kill_argv(pidfile: str) -> list[str]:
    return ["/bin/sh", "-c", KILL_TREE, "legorl", pidfile]


def env_list(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]
