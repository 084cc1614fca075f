"""Reference scaffolds in Harbor's sense: `oracle` runs the task's own solution, `nop` does nothing.

They bound a task set from both sides without a model: oracle should score 1 and nop 0 on every
usable task (`legorl eval TASKS --agent oracle`), and they exercise the whole trial path cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.env.base import Sandbox
from legorl.tasks.model import Task


class OracleScaffold:
    """Runs solution/solve.sh at /solution (mounted only for this run, then hidden again)."""

    name: ClassVar[str] = "oracle"
    needs_model: ClassVar[bool] = False

    def __init__(self, task: Task | None = None):
        self.task = task

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        from legorl.env import run_oracle

        task = self.task or getattr(sandbox, "task", None)
        if task is None:
            return ScaffoldResult("error", error="oracle needs the task (pass task=, or a sandbox with .task)")
        if not task.has_solution:
            return ScaffoldResult("error", error=f"{task.solution_dir}/solve.sh not found")
        res = await run_oracle(sandbox, task, timeout=limits.timeout_sec)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "oracle.log").write_text(
            f"exit code: {res.exit_code}\ntimed out: {res.timed_out}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}\n"
        )
        if not res.ok:
            tail = (res.stdout + res.stderr).strip()[-300:]
            return ScaffoldResult("error", 1, f"solve.sh exited {res.exit_code}: {tail}")
        return ScaffoldResult("submitted", 1)


class NopScaffold:
    """Does nothing: the task's untouched state must score 0."""

    name: ClassVar[str] = "nop"
    needs_model: ClassVar[bool] = False

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        return ScaffoldResult("finished", 0)
