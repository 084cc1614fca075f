"""Oracle / no-op check: a usable RL task scores 1 with its reference solution and 0 untouched.

A task failing either side gives no learning signal (or a wrong one), so authors and converters
should run this before a task set is trained on. Trials run in real sandboxes from `legorl.env`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from legorl.tasks.model import Task


@dataclass(frozen=True)
class CheckResult:
    task_id: str
    noop_reward: float | None
    oracle_reward: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.noop_reward == 0.0 and self.oracle_reward == 1.0

    @property
    def problem(self) -> str:
        """Why the task is unusable ('' when it is fine)."""
        if self.error:
            return self.error
        issues = []
        if self.noop_reward != 0.0:
            issues.append(f"doing nothing scores {self.noop_reward} (want 0)")
        if self.oracle_reward != 1.0:
            issues.append(f"the oracle scores {self.oracle_reward} (want 1)")
        return "; ".join(issues)


async def _trial(task: Task, oracle: bool, backend: str) -> float:
    from legorl.env import make_sandbox, phases, run_oracle
    from legorl.env.separate import verify_trial

    sb = make_sandbox(task, backend=backend)
    await sb.start()
    try:
        await phases.healthcheck(sb, task)  # as a trial does: the image's service is up before the agent
        await phases.enter_phase(sb, "agent")
        if oracle:
            res = await run_oracle(sb, task)
            if not res.ok:
                tail = (res.stdout + res.stderr).strip()[-300:]
                raise RuntimeError(f"solution/solve.sh exited {res.exit_code}: {tail}")
        result = await verify_trial(sb, task, lambda t: make_sandbox(t, backend=backend))
        if result.reward is None:
            raise RuntimeError(f"verifier_error: {result.reason}")
        return float(result.reward)
    finally:
        await sb.stop()


async def check_task(task: Task, backend: str = "local") -> CheckResult:
    """Run a no-op trial and an oracle trial of `task`, each in a fresh sandbox."""
    if not task.has_solution:
        return CheckResult(task.id, None, None, "no solution/solve.sh to check against")
    noop = oracle = None
    try:
        noop = await _trial(task, False, backend)
        oracle = await _trial(task, True, backend)
    except Exception as exc:  # any failure is this task's result, not the whole run's
        return CheckResult(task.id, noop, oracle, f"{type(exc).__name__}: {exc}")
    return CheckResult(task.id, noop, oracle)


async def check_tasks(tasks: Sequence[Task], backend: str = "local", concurrency: int = 2) -> list[CheckResult]:
    """Check many tasks, `concurrency` at a time; results follow the input order."""
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(task: Task) -> CheckResult:
        async with sem:
            return await check_task(task, backend)

    return list(await asyncio.gather(*(one(t) for t in tasks)))
