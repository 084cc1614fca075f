"""The image's ENTRYPOINT / CMD, started in the background when a local sandbox starts.

Harbor keeps a trial's container alive with a keep-alive command, which replaces the image's CMD and is
handed to its ENTRYPOINT as arguments: an entrypoint that starts a service (and ends in `exec "$@"`)
runs, a CMD never does. legorl starts what the image would serve, by this rule:
- ENTRYPOINT set: it runs, with CMD's words as its arguments unless CMD is only a shell or a keep-alive
  (then with none: the keep-alive is legorl's own business). A shell-form ENTRYPOINT ignores CMD, as
  in Docker.
- CMD alone: it runs unless it is the image's default shell or a keep-alive: a shell, REPL or
  `sleep`/`tail -f` with no script to run (`["bash"]`, `/bin/sh`, `["python3"]`, `sleep infinity`,
  `tail -f /dev/null`) is what `docker run -it` would give a user, not a service.
Its output goes to /logs/agent/entrypoint.log (collected with the trial's logs). It runs as the trial's
uid in the agent's environment and lives until the trial ends (`legorl.env.persist`); whether it came up
is what `[environment.healthcheck]` checks (`legorl.env.phases.healthcheck`).
"""

from __future__ import annotations

import os
import shlex
from typing import Any

LOG = "/logs/agent/entrypoint.log"
_SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh", "fish", "python", "python3", "ipython", "node", "irb",
           "perl", "ruby"}
_SHELL_FLAGS = {"-l", "--login", "-i", "-c"}  # `-c` with nothing after it is no script either


def _words(argv: list[str]) -> list[str]:
    """A shell-form command (`["/bin/sh", "-c", "bash"]`) as the words it runs; exec form as is."""
    if len(argv) == 3 and argv[1] == "-c" and os.path.basename(argv[0]) in _SHELLS:
        try:
            return shlex.split(argv[2])
        except ValueError:
            return argv
    return argv


def is_idle(argv: list[str]) -> bool:
    """True for a default shell / REPL / keep-alive: nothing a service would run."""
    words = _words(argv)
    if not words:
        return True
    name = os.path.basename(words[0])
    rest = words[1:]
    if name in _SHELLS or name.startswith("python"):
        return all(w in _SHELL_FLAGS for w in rest)
    if name == "sleep":
        return True
    if name == "tail":
        return "-f" in rest or "-F" in rest
    return name in ("true", "cat") and not rest


def service_argv(service: dict[str, list[str]]) -> list[str] | None:
    """The argv to start for an image's {"entrypoint": [...], "cmd": [...]}, or None (see the rule)."""
    entry, cmd = service.get("entrypoint") or [], service.get("cmd") or []
    if entry:
        shell_form = len(entry) == 3 and entry[1] == "-c" and os.path.basename(entry[0]) in _SHELLS
        args = [] if shell_form or is_idle(cmd) else cmd
        return [*entry, *args]
    if cmd and not is_idle(cmd):
        return cmd
    return None


async def start_service(sb: Any) -> None:
    """Starts the image's service in `sb` (a LocalSandbox) in the background; a no-op without one."""
    argv = service_argv(getattr(sb, "service", {}) or {})
    if not argv:
        return
    line = f"({shlex.join(argv)}) </dev/null >>{LOG} 2>&1 &"
    r = await sb.exec(line, timeout=60)
    if r.exit_code != 0:
        from legorl.env.base import SandboxError

        raise SandboxError(f"ENTRYPOINT/CMD {shlex.join(argv)!r} could not be started: "
                           f"{(r.stderr or r.stdout).strip()[:300]}")
    sb.notes.append(f"started the image's ENTRYPOINT/CMD in the background: {shlex.join(argv)[:200]}")
