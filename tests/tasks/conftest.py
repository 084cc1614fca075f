"""Helpers: run a task's verifier (and oracle) for real under bubblewrap, at Harbor's paths."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")


def bwrap_run(task_dir: Path, work: Path, *, oracle: bool = False, timeout: float = 60.0) -> float:
    """Copy environment/ into a fresh /app, optionally run solution/solve.sh, then tests/test.sh.

    Returns the reward the verifier wrote (reward.json wins over reward.txt, as in Harbor).
    """
    app, logs = work / "app", work / "logs"
    if app.exists():
        shutil.rmtree(app)
    shutil.copytree(task_dir / "environment", app, ignore=shutil.ignore_patterns("Dockerfile"))
    logs.mkdir(parents=True, exist_ok=True)
    base = [
        BWRAP, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", str(app), "/app",
        "--unshare-net", "--unshare-pid", "--die-with-parent", "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--chdir", "/app",
    ]
    if oracle:
        sol = subprocess.run([*base, "--ro-bind", str(task_dir / "solution"), "/solution",
                              "bash", "/solution/solve.sh"], capture_output=True, text=True, timeout=timeout)
        assert sol.returncode == 0, f"solve.sh failed for {task_dir.name}: {sol.stdout}{sol.stderr}"
    proc = subprocess.run([*base, "--ro-bind", str(task_dir / "tests"), "/tests",
                           "--bind", str(logs), "/logs/verifier", "bash", "/tests/test.sh"],
                          capture_output=True, text=True, timeout=timeout)
    return read_reward(logs, proc)


def read_reward(logs: Path, proc: subprocess.CompletedProcess | None = None) -> float:
    import json

    if (logs / "reward.json").is_file():
        return float(json.loads((logs / "reward.json").read_text())["reward"])
    if (logs / "reward.txt").is_file():
        return float((logs / "reward.txt").read_text().strip())
    detail = f"\n{proc.stdout}\n{proc.stderr}" if proc else ""
    raise AssertionError(f"verifier wrote no reward{detail}")
