"""Static task selection and the online pass-rate filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legorl.tasks.filter import PassRateFilter, select_tasks
from legorl.tasks.model import Task


def task(tid: str, tags=(), difficulty=None) -> Task:
    meta = {"tags": list(tags)} | ({"difficulty": difficulty} if difficulty else {})
    return Task(id=tid, path=Path("/nowhere") / tid, instruction="x", metadata=meta)


TASKS = [task("a-1", ["shell"], "easy"), task("a-2", ["shell", "python"], "easy"), task("b-1", ["bugfix"], "hard")]


def test_select_tasks():
    assert [t.id for t in select_tasks(TASKS, tags=["python", "bugfix"])] == ["a-2", "b-1"]
    assert [t.id for t in select_tasks(TASKS, exclude_tags=["python"])] == ["a-1", "b-1"]
    assert [t.id for t in select_tasks(TASKS, id_glob="a-*", difficulty=["easy"])] == ["a-1", "a-2"]
    assert [t.id for t in select_tasks(TASKS, ids=["b-1", "zz"])] == ["b-1"]
    assert select_tasks(TASKS) == TASKS


def test_pass_rate_filter_drops_uniform_tasks():
    f = PassRateFilter(window=8, min_attempts=4, revisit=0.0)
    f.record("a-1", [1, 1, 1, 1])  # always solved
    f.record("a-2", [0, 1, 0, 0])  # mixed: signal
    f.record("b-1", [0, 0, 0])  # too few attempts to judge
    assert [t.id for t in f.filter(TASKS)] == ["a-2", "b-1"]
    f.record("b-1", [0])
    assert [t.id for t in f.filter(TASKS)] == ["a-2"]
    assert f.summary() == {"measured": 3, "too_easy": 1, "too_hard": 1, "informative": 1}
    f.record("a-1", [0] * 8)  # the window forgets old successes
    assert f.mean_reward("a-1") == 0.0 and f.attempts("a-1") == 8


def test_revisit_and_state_round_trip():
    f = PassRateFilter(min_attempts=1, revisit=0.5, seed=3)
    for t in TASKS:
        f.record(t.id, [1.0])
    kept = [len(f.filter(TASKS)) for _ in range(200)]
    assert 0 < sum(kept) < 600  # some re-admitted, not all
    g = PassRateFilter(min_attempts=1, revisit=0.5)
    g.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert [g.filter(TASKS) for _ in range(5)] == [f.filter(TASKS) for _ in range(5)]
    with pytest.raises(ValueError):
        PassRateFilter(window=2, min_attempts=3)
