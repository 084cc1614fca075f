"""Backend checks for `legorl preflight`: can this host run the configured sandbox, and how isolated.

Each check is (level, message) with level PASS, WARN or FATAL; a FATAL means trials would fail.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from legorl.env.base import SandboxError
from legorl.tasks.model import Task

Check = tuple[str, str]


async def check_backend(backend: str = "local", **opts: Any) -> list[Check]:
    """Starts one throwaway sandbox on `backend` and runs `true` in it; reports what is missing."""
    from legorl.env import make_sandbox

    out: list[Check] = []
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "environment").mkdir()
        task = Task(id="preflight", path=Path(d), instruction="")
        try:
            sb = make_sandbox(task, backend, **opts)
        except SandboxError as e:
            return [("FATAL", str(e))]
        try:
            await sb.start()
            r = await sb.exec("true", timeout=60)
            if r.exit_code != 0:
                out.append(("FATAL", f"{backend} sandbox cannot run a command: {r.stderr.strip()[:300]}"))
            else:
                out.append(("PASS", f"{backend} sandbox starts and runs commands"))
            describe = getattr(sb, "describe", None)
            info = describe() if describe else {}
            if info.get("missing"):
                out.append(("WARN", f"{backend} sandbox isolation reduced: {info['missing']}"))
            if backend == "local":
                out += trial_helper_checks()
        except (SandboxError, OSError) as e:
            out.append(("FATAL", f"{backend} sandbox unavailable: {e}"))
        finally:
            await sb.stop()
    return out


def trial_helper_checks() -> list[Check]:
    """As root (where a task's Dockerfile becomes an image layer), which helper mounts the layer at every exec:
    the compiled one, or Python (~12 ms of CPU an exec: env/overlay_exec.py)."""
    import os

    from legorl.env import overlay_exec

    if os.geteuid() != 0:
        return []
    if overlay_exec.trial_helper() != overlay_exec.python_helper():
        return [("PASS", "local sandbox: trials over an image layer mount it through the compiled helper")]
    return [("WARN", "local sandbox: every exec of a trial over an image layer starts Python to mount the layer "
                     "(~12 ms of CPU each, ~7% of a look-act run's CPU on 2 cores): install a C compiler (gcc) or "
                     "set CC so the compiled helper builds (unless LEGORL_OVERLAY_HELPER=python is meant)")]
