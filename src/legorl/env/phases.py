"""Harbor's trial phases on any backend: healthcheck before the agent, per-phase network/user/env,
and the trial's logs and artifacts copied out before the sandbox goes.

A backend that can switch the network or the user's name between phases implements
`enter_phase(phase)` ("agent", "solution", "verifier"); the others run every phase as started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path, PurePosixPath

from legorl.env.base import Sandbox, SandboxError
from legorl.env.output import tail
from legorl.tasks.model import Task

log = logging.getLogger(__name__)
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")


async def enter_phase(sandbox: Sandbox, phase: str) -> None:
    hook = getattr(sandbox, "enter_phase", None)
    if hook is not None:
        await hook(phase)


async def healthcheck(sandbox: Sandbox, task: Task) -> int:
    """Runs [environment.healthcheck] until it passes (Docker's HEALTHCHECK rules); returns the
    attempts it took. Raises SandboxError with the last output when the environment never gets healthy."""
    hc = task.healthcheck
    if hc is None:
        return 0
    t0 = time.monotonic()
    failures = attempts = 0
    while True:
        attempts += 1
        r = await sandbox.exec(hc.command, timeout=hc.timeout_sec)
        if r.ok:
            return attempts
        in_start = time.monotonic() - t0 < hc.start_period_sec
        failures += 0 if in_start else 1
        if failures >= max(hc.retries, 1):
            why = "timed out" if r.timed_out else f"exit code {r.exit_code}"
            lines = [x.strip() for x in tail(r.stdout + r.stderr, 300).splitlines() if x.strip()]
            said = " | ".join(lines)[-200:]  # one line: it becomes the trial's reason
            raise SandboxError(f"healthcheck failed {failures} time(s) ({why}) after {attempts} attempt(s) in "
                               f"{time.monotonic() - t0:.1f}s: {hc.command!r}" + (f"; output: {said}" if said else ""))
        await asyncio.sleep(hc.start_interval_sec if in_start else hc.interval_sec)


async def collect(sandbox: Sandbox, task: Task, dest: Path) -> list[str]:
    """Copies /logs/{agent,verifier,artifacts} and the task's `artifacts` paths into `dest`
    (logs/<name>, artifacts/<path>); returns what could not be copied (a missing path is no error)."""
    missing: list[str] = []
    wanted = [(d, dest / "logs" / PurePosixPath(d).name) for d in LOG_DIRS]
    wanted += [(p, dest / "artifacts" / p.strip("/")) for p in task.artifacts]
    for src, dst in wanted:
        probe = await sandbox.exec(f"test -e '{src}'", cwd="/", timeout=30)
        if not probe.ok:
            if src not in LOG_DIRS:
                missing.append(f"{src}: not found")
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                await sandbox.download(src, dst)
        except (SandboxError, OSError) as exc:
            missing.append(f"{src}: {exc}")
    return missing
