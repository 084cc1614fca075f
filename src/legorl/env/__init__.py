"""Environment layer: per-trial sandboxes (local bubblewrap, docker, kubernetes), verifier, guards.

sb = make_sandbox(task)                 # or backend="docker" / "kubernetes", **backend options
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
from legorl.tasks.model import Task

BACKENDS = ("local", "docker", "kubernetes")


def make_sandbox(task: Task, backend: str = "local", **opts: Any) -> Sandbox:
    """One fresh sandbox for one trial of `task`; backend options pass through to its class."""
    if backend == "local":
        from legorl.env.local import LocalSandbox

        return LocalSandbox(task, **opts)
    if backend == "docker":
        from legorl.env.docker import DockerSandbox

        return DockerSandbox(task, **opts)
    if backend in ("kubernetes", "k8s"):
        from legorl.env.kubernetes import KubernetesSandbox

        return KubernetesSandbox(task, **opts)
    raise SandboxError(f"unknown sandbox backend {backend!r}: choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "VerifyResult",
    "check_backend",
    "make_sandbox",
    "run_oracle",
    "verify",
]
