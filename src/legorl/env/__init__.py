"""Environment layer: per-trial sandboxes (local bubblewrap, docker, kubernetes), verifier, guards.

sb = make_sandbox(task)                 # or backend="docker" / "kubernetes" / "pkg.mod:Class", **opts
await sb.start()
r = await sb.exec("ls", timeout=10)     # ExecResult(exit_code, stdout, stderr, timed_out, ...)
result = await verify(sb, task)         # VerifyResult(reward, rewards, outcome, reason, flags)
await sb.stop()
"""

from __future__ import annotations

from typing import Any

from legorl.env.base import ExecResult, Sandbox, SandboxError
from legorl.env.health import check_backend
from legorl.env.verifier import VerifyResult, run_oracle, verify
from legorl.plugins import load_object
from legorl.tasks.model import Task

BACKENDS = ("local", "docker", "kubernetes")
# name -> "module:Class", imported on use; any other `module:Class` works too (a user's own backend).
SANDBOXES: dict[str, str] = {
    "local": "legorl.env.local:LocalSandbox",
    "docker": "legorl.env.docker:DockerSandbox",
    "kubernetes": "legorl.env.kubernetes:KubernetesSandbox",
    "k8s": "legorl.env.kubernetes:KubernetesSandbox",
}


class UnknownBackendError(SandboxError, ValueError):
    """A backend spec that names no registered backend and no importable `module:Class`.

    Both a SandboxError (what sandbox callers catch) and a ValueError (what config checks catch).
    """


def sandbox_class(backend: str) -> type[Sandbox]:
    """The class behind a backend name or `module:Class` (UnknownBackendError, one line, if none)."""
    try:
        return load_object(backend, SANDBOXES, "sandbox backend")
    except ValueError as exc:
        raise UnknownBackendError(str(exc)) from exc.__cause__


def make_sandbox(task: Task, backend: str = "local", **opts: Any) -> Sandbox:
    """One fresh sandbox for one trial of `task`; backend options pass through to its class.

    `backend` is a name in SANDBOXES or `module:Class` for a class taking `(task, **opts)`.
    """
    return sandbox_class(backend)(task, **opts)


__all__ = [
    "BACKENDS",
    "SANDBOXES",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "UnknownBackendError",
    "VerifyResult",
    "check_backend",
    "make_sandbox",
    "run_oracle",
    "sandbox_class",
    "verify",
]
