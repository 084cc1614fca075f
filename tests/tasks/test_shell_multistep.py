"""builtin:shell-multistep: every task needs the sandbox read first.

Per task (half of each kind, one test per kind; LEGORL_ALL_TASKS=1 takes all of them), in one real sandbox
session (legorl.env's local backend and verifier): doing nothing scores 0, each blind command scores 0 (two sibling variants' oracles: the memorised
answer of the same kind, plus the task's naive `blind_commands`), and the oracle scores 1, as does its demonstration
(`solution/demonstration.json`, warm_start's data: look, then act, one command per exec). /app is restored from
a pristine copy between attempts, so each one starts from the task's initial state. The set is committed and
test_generator_reproduces_committed_set pins it to the generator, so the half (every other task of a kind, ~50 s
less of the suite) proves the path; run with LEGORL_ALL_TASKS=1 after changing the generator.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from legorl.tasks.builtin_sets import builtin_path, load_builtin
from legorl.tasks.model import Task
from legorl.train.warmstart import demonstration_commands

from .conftest import BWRAP

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "scripts/gen_shell_multistep.py"
TASKS = load_builtin("shell-multistep")
BY_KIND: dict[str, list[Task]] = defaultdict(list)
for _t in TASKS:
    BY_KIND[_t.metadata["kind"]].append(_t)
RESTORE = "{ find /app -mindepth 1 -delete && cp -a /tmp/pristine/. /app/; } || exit 99"


def oracle_text(task: Task) -> str:
    return (task.solution_dir / "solve.sh").read_text()


SIBLINGS = 2  # memorised answers tried per task; test_set_shape checks that no two of a kind share one


def siblings(task: Task) -> list[Task]:
    """The next SIBLINGS tasks of its kind, in a ring: every task is tried as a memorised answer (linear in the
    kind's size; all pairs cost 4x more here and test_set_shape already proves the answers differ)."""
    kind = BY_KIND[task.metadata["kind"]]
    i = kind.index(task)
    return [kind[(i + k) % len(kind)] for k in range(1, min(SIBLINGS, len(kind) - 1) + 1)]


def blind_commands(task: Task) -> list[tuple[str, str]]:
    """(label, command): siblings' oracles, then the task's own naive guesses."""
    out = [(f"oracle of {s.id}", oracle_text(s)) for s in siblings(task)]
    return out + [(f"blind {c!r}", c) for c in task.metadata["blind_commands"]]


def test_set_shape():
    assert len(TASKS) >= 30
    assert len(BY_KIND) >= 8 and all(len(v) >= 3 for v in BY_KIND.values()), {k: len(v) for k, v in BY_KIND.items()}
    assert {t.metadata["difficulty"] for t in TASKS} == {"easy", "medium", "hard"}
    for kind, tasks in BY_KIND.items():
        # Identical instructions: the hidden values are only in the sandbox, never in the prompt.
        assert len({t.instruction for t in tasks}) == 1, kind
        assert len({oracle_text(t).split("\ncd /app\n")[1] for t in tasks}) == len(tasks), f"{kind}: same answer"


def test_loads_as_train_set():
    from legorl.config.trials import TasksSection
    from legorl.tasks.split import load_task_split

    train, val = load_task_split(TasksSection(train="builtin:shell-multistep"))
    assert len(train) + len(val) == len(TASKS) and val and {t.id for t in train}.isdisjoint(t.id for t in val)


def test_generator_reproduces_committed_set(tmp_path):
    run = [sys.executable, str(GENERATOR), "--check"]
    r = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"run scripts/gen_shell_multistep.py and commit:\n{r.stdout}{r.stderr}"
    copy = shutil.copytree(builtin_path("shell-multistep"), tmp_path / "set")
    (copy / "lookup-2/tests/test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    r = subprocess.run([*run, "--out", str(copy)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "lookup-2/tests/test.sh" in r.stdout, r.stdout + r.stderr


async def _rewards(task: Task) -> dict[str, float | None]:
    from legorl.env import make_sandbox, run_oracle, verify
    from legorl.env.phases import enter_phase

    async def score() -> float | None:
        # guard=False: the anti-tamper guards are legorl.env's to test; here a reward left by the
        # previous attempt would read as planted. It still clears the reward files first.
        res = await verify(sb, task, guard=False)
        assert res.ok, f"{task.id}: {res.outcome} {res.reason}"
        return res.reward

    async def sh(cmd: str) -> int:
        await enter_phase(sb, "agent")
        return (await sb.exec(cmd, cwd="/app", timeout=30)).exit_code

    sb = make_sandbox(task)
    await sb.start()
    try:
        assert await sh("cp -a /app /tmp/pristine") == 0
        rewards = {"no-op": await score()}
        for label, cmd in blind_commands(task):
            assert await sh(f"{RESTORE}\n{cmd}") != 99, f"{task.id}: could not restore /app"
            rewards[label] = await score()
        assert await sh(RESTORE) == 0
        res = await run_oracle(sb, task)
        assert res.ok, f"{task.id}: solve.sh exited {res.exit_code}: {res.stderr[-300:]}"
        rewards["oracle"] = await score()
        # the demonstration (warm_start's data): its commands one per exec, as turns run them
        assert await sh(RESTORE) == 0
        for cmd in demonstration_commands(task) or []:
            await sh(cmd)
        rewards["demonstration"] = await score()
    finally:
        await sb.stop()
    return rewards


async def _kind_rewards(tasks: list[Task]) -> list[dict[str, float | None]]:
    """Two sessions at a time (2-core CI): each spends most of its time waiting on bwrap spawns."""
    sem = asyncio.Semaphore(2)

    async def one(task: Task) -> dict[str, float | None]:
        async with sem:
            return await _rewards(task)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_oracle_one_noop_and_blind_zero(kind):
    tasks = BY_KIND[kind] if os.environ.get("LEGORL_ALL_TASKS") == "1" else BY_KIND[kind][::2]
    wrong = []
    for task, rewards in zip(tasks, asyncio.run(_kind_rewards(tasks)), strict=True):
        assert len(rewards) >= 3 + SIBLINGS, task.id  # no-op, oracle, demonstration, siblings' oracles
        bad = {k: v for k, v in rewards.items() if v != (1.0 if k in ("oracle", "demonstration") else 0.0)}
        if bad:
            wrong.append(f"{task.id}: {bad}")
    assert not wrong, "\n".join(wrong)
