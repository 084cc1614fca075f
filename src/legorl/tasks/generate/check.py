"""Proof that a generated task needs looking: no-op 0, every blind command 0, oracle 1, demonstration 1, and
the demonstration types no generated value (a name, a number) before the instruction or an output showed it.

All attempts run in one real sandbox session per task (legorl.env), /app restored from a pristine copy
between them. Blind commands: the task's `[metadata] blind_commands` (its action on a decoy, a naive
guess, the action on every candidate at once) and the oracles of up to two siblings of its kind whose
answers differ (what a policy that memorised another variant would type).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from legorl.tasks.model import Task

# what the generator draws: identifiers (`lotus_43`, `iris_old`), file names (`walnut-15.cfg`), numbers of 2+ digits
VALUE_SHAPES = re.compile(r"\b[A-Za-z]+_(?:old|\d+)\b|\b[A-Za-z]+-\d+\.[A-Za-z]+\b|(?<![\w.+-])\d{2,}\b")
RESTORE = "{ find /app -mindepth 1 -delete && cp -a /tmp/pristine/. /app/; } || exit 99"
EXPECT = {"oracle": 1.0, "demonstration": 1.0}  # everything else: 0


@dataclass
class TaskCheck:
    task_id: str
    rewards: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None

    @property
    def wrong(self) -> dict[str, float | None]:
        return {k: v for k, v in self.rewards.items() if v != EXPECT.get(k, 0.0)}

    @property
    def ok(self) -> bool:
        return self.error is None and not self.wrong and "oracle" in self.rewards


def demonstration(task: Task) -> list[str]:
    """solution/demonstration.json's commands (the shape legorl.train.warmstart reads; read here without
    importing torch)."""
    return json.loads((task.solution_dir / "demonstration.json").read_text())["commands"]


def unseen_values(instruction: str, steps: Sequence[tuple[str, str]]) -> list[str]:
    """Value-shaped words a demonstration types (`steps`: each command and its output, in order) that neither
    the instruction nor an earlier output showed: a demonstration that knows them teaches guessing, not looking."""
    seen, out = instruction, []
    for cmd, output in steps:
        out += [w for w in VALUE_SHAPES.findall(cmd) if w not in seen]
        seen += "\n" + output
    return out


def _oracle(task: Task) -> str:
    return (task.solution_dir / "solve.sh").read_text()


def sibling_oracles(tasks: Sequence[Task], per_task: int = 2) -> dict[str, list[tuple[str, str]]]:
    """task id -> (label, oracle text) of the next `per_task` tasks of its kind (in a ring) with another answer."""
    by_kind: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_kind[str(t.metadata.get("kind"))].append(t)
    out: dict[str, list[tuple[str, str]]] = {}
    for kind in by_kind.values():
        for i, t in enumerate(kind):
            mine, found = _oracle(t).split("\ncd /app\n")[-1], []
            for k in range(1, len(kind)):
                s = kind[(i + k) % len(kind)]
                if len(found) < per_task and _oracle(s).split("\ncd /app\n")[-1] != mine:
                    found.append((f"oracle of {s.id}", _oracle(s)))
            out[t.id] = found
    return out


async def check_one(task: Task, siblings: list[tuple[str, str]], backend: str = "local") -> TaskCheck:
    from legorl.env import make_sandbox, run_oracle, verify
    from legorl.env.phases import enter_phase
    result = TaskCheck(task.id)
    sb = make_sandbox(task, backend=backend)

    async def score() -> float | None:
        # guard=False: a reward left by the previous attempt would read as planted; verify clears it first
        return (await verify(sb, task, guard=False)).reward

    async def run(cmd: str):
        await enter_phase(sb, "agent")
        return await sb.exec(cmd, cwd="/app", timeout=30)

    async def sh(cmd: str) -> int:
        return (await run(cmd)).exit_code

    try:
        await sb.start()
        if await sh("cp -a /app /tmp/pristine") != 0:
            raise RuntimeError("could not copy /app")
        result.rewards["no-op"] = await score()
        blind = [*siblings, *((f"blind {c!r}", c) for c in task.metadata.get("blind_commands", []))]
        for label, cmd in blind:
            if await sh(f"{RESTORE}\n{cmd}") == 99:
                raise RuntimeError("could not restore /app")
            result.rewards[label] = await score()
        await sh(RESTORE)
        res = await run_oracle(sb, task)
        if not res.ok:
            raise RuntimeError(f"solve.sh exited {res.exit_code}: {(res.stdout + res.stderr)[-300:]}")
        result.rewards["oracle"] = await score()
        await sh(RESTORE)
        steps = []
        for cmd in demonstration(task):
            res = await run(cmd)
            steps.append((cmd, res.stdout + res.stderr))
        result.rewards["demonstration"] = await score()
        if unseen := unseen_values(task.instruction, steps):
            result.error = f"the demonstration types {unseen} before the instruction or an output shows them"
    except Exception as exc:  # one task's failure is its result
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        await sb.stop()
    return result


async def check_generated(tasks: Sequence[Task], backend: str = "local", concurrency: int = 2) -> list[TaskCheck]:
    """Check every task (siblings drawn from `tasks` itself), `concurrency` sessions at once, in input order."""
    siblings = sibling_oracles(tasks)
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(t: Task) -> TaskCheck:
        async with sem:
            return await check_one(t, siblings[t.id], backend)

    return list(await asyncio.gather(*(one(t) for t in tasks)))
