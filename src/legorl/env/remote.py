"""Shell snippets shared by the container backends (docker, kubernetes), whose APIs cannot kill an exec.

Each exec records its shell's pid in a file; on timeout a second exec kills that process tree through
/proc (works in any image with a POSIX sh). `quiesce` kills the agent's leftovers before verification
(in a container one live process could rewrite the reward after test.sh), but spares the processes that
were up when the agent's phase began: the image's ENTRYPOINT and its services, which test.sh may query.
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
# The pids running once the environment is up (the image's ENTRYPOINT and the services it started,
# healthy by then): `quiesce_argv` spares them and their descendants, so test.sh can still query them.
SNAPSHOT = "for d in /proc/[0-9]*; do p=${d#/proc/}; [ \"$p\" = $$ ] || printf '%s ' \"$p\"; done"
_QUIESCE_KEEP = (
    'keep=" $1 "; for d in /proc/[0-9]*; do p=${d#/proc/}; q=$p; '
    'while [ "${q:-0}" -gt 1 ]; do case "$keep" in *" $q "*) break;; esac; '
    "q=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$q/status 2>/dev/null); done; "
    '[ "$p" = 1 ] || [ "$p" = $$ ] || [ "${q:-0}" -gt 1 ] || kill -9 "$p" 2>/dev/null; done; true'
)


def quiesce_argv(keep: str | None) -> list[str]:
    """Kills the agent's leftovers: every process but init, this shell and the `keep` pids' trees."""
    if not keep or not keep.strip():
        return ["/bin/sh", "-c", QUIESCE]
    return ["/bin/sh", "-c", _QUIESCE_KEEP, "legorl", keep.strip()]


def wrapped(cmd: str) -> tuple[list[str], str]:
    """argv that runs `cmd` under bash with a pid file, and that pid file's path."""
    pidfile = f"/tmp/.legorl-exec-{uuid.uuid4().hex[:12]}"
    return ["/bin/sh", "-c", WRAP, "legorl", cmd, pidfile], pidfile


def kill_argv(pidfile: str) -> list[str]:
    return ["/bin/sh", "-c", KILL_TREE, "legorl", pidfile]


def env_list(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]
