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
        except (SandboxError, OSError) as e:
            out.append(("FATAL", f"{backend} sandbox unavailable: {e}"))
        finally:
            await sb.stop()
    return out
