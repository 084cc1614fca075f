"""Sandbox protocol: one fresh, isolated environment per trial.

Backends (local bubblewrap, docker, kubernetes) implement this; workers, scaffolds and the verifier
only ever see this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


class SandboxError(RuntimeError):
    """The sandbox could not be created or used (backend missing, setup failed)."""


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False  # the kernel killed a process at the memory limit

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxLifecycle:
    """`async with sandbox:` starts it and always stops it (shared by every backend)."""

    async def __aenter__(self):
        await self.start()  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()  # type: ignore[attr-defined]


@runtime_checkable
class Sandbox(Protocol):
    async def start(self) -> None: ...

    async def exec(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecResult: ...

    async def upload(self, src: Path, dst: str) -> None: ...

    async def download(self, src: str, dst: Path) -> None: ...

    async def stop(self) -> None: ...
