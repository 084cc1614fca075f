"""RolloutBuffer semantics and the async loop's staleness bound, with fake trials (no model)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from _async_fakes import FakeRuntime, FakeTrainer

from legorl.config import load_config
from legorl.ops.metrics import MetricsLogger
from legorl.rundir import RunDir
from legorl.tasks.model import Task
from legorl.train import loop
from legorl.train.buffer import RolloutBuffer
from legorl.train.sampler import TaskSampler
from legorl.train.steps import Start
from legorl.trial import TrialResult, TrialSpec, TrialTokens

TASKS = [Task(id=f"t{i}", path=Path("/nonexistent"), instruction="x") for i in range(5)]


def result(gid: str, version: int, attempt: int = 0, task: Task = TASKS[0]) -> TrialResult:
    tokens = TrialTokens([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], weight_versions=[-1, version, version + 1])
    return TrialResult(TrialSpec(task, attempt, gid, trial_id=f"{gid}-{attempt}"), "failed", "", 0.0, tokens)


async def test_only_complete_groups_are_released_in_completion_order():
    buf = RolloutBuffer()
    buf.expect("a", 2)
    buf.expect("b", 2)
    await buf.add(result("a", 0, 0))
    await buf.add(result("b", 0, 0))
    await buf.add(result("b", 0, 1))
    assert buf.ready_groups == 1 and buf.pending_groups == 1
    got, stats = await buf.get_batch(1, actor_version=0)
    assert [r.group_id for r in got] == ["b", "b"] and stats.staleness == [0, 0]
    waiter = asyncio.create_task(buf.get_batch(1, actor_version=0))
    await asyncio.sleep(0.01)
    assert not waiter.done()  # half a group is never handed out
    await buf.add(result("a", 0, 1))
    got, _ = await asyncio.wait_for(waiter, 1)
    assert {r.spec.attempt for r in got} == {0, 1}


async def test_groups_past_the_bound_are_dropped_whole_and_counted():
    buf = RolloutBuffer(staleness_threshold=1)
    for gid, v in (("old", 0), ("ok", 1), ("new", 2)):
        buf.expect(gid, 2)
        await buf.add(result(gid, v, 0))
        await buf.add(result(gid, v, 1))
    got, stats = await buf.get_batch(2, actor_version=2)
    assert [r.group_id for r in got] == ["ok", "ok", "new", "new"]
    assert stats.dropped_groups == 1 and stats.dropped_rollouts == 2
    m = stats.metrics()
    assert m["trajectory_filter/dropped_stale"] == 2.0 and m["fully_async/staleness/max"] == 1.0


class FakeSync:
    def __init__(self) -> None:
        self.version = 0

    last_bytes = 0
    last_full_bytes = 0
    retries = 0

    async def push_stream(self, produce, version=None, mode="wait") -> int:
        produce(lambda _bucket: None)
        self.version = self.version + 1 if version is None else version
        return self.version


def fake_learn(trainer, kept):
    """Stands in for the update (no model here): takes a little time, like one."""
    import time

    time.sleep(0.01)
    return {}


class FakeRunner:
    """Trials whose tokens carry the engine version at their start; durations vary (out-of-order)."""

    def __init__(self, sync: FakeSync):
        self.sync, self.rng = sync, random.Random(0)

    async def run(self, specs, temperature, on_done=None):
        v = self.sync.version
        await asyncio.sleep(self.rng.choice([0.001, 0.005, 0.06]))
        for s in specs:
            await on_done(result(s.group_id, v, s.attempt, s.task))


async def run_async_steps(tmp_path, monkeypatch, cfg, runner, sync) -> list[dict]:
    """`train()`'s async branch with fakes for the runtime and the update."""
    monkeypatch.setattr(loop, "save", lambda *a, **k: None)
    monkeypatch.setattr(loop, "learn", fake_learn)
    run_dir = RunDir(tmp_path / "r", "r")
    start = Start(1, MetricsLogger(run_dir.logs, run_dir.name, sinks=[]))
    history: list[dict] = []
    await asyncio.wait_for(loop._async_steps(cfg, run_dir, FakeRuntime(runner), FakeTrainer(), sync,
                                             TaskSampler(TASKS), [], start,
                                             lambda step, m: history.append({"step": step, **m}), None), 30)
    return history


@pytest.mark.parametrize("staleness", [0, 1, 3])
async def test_loop_never_trains_past_the_bound_and_never_deadlocks(tmp_path, monkeypatch, staleness):
    cfg = load_config(None, ["async_training.enabled=true", f"async_training.staleness_threshold={staleness}",
                             "rollout.concurrency=8", "trainer.train_batch_size=2", "trainer.total_steps=12",
                             f"run.output_dir={tmp_path}", "algorithm.n_resp_per_prompt=2"])
    sync = FakeSync()
    history = await run_async_steps(tmp_path, monkeypatch, cfg, FakeRunner(sync), sync)
    assert len(history) == 12
    assert max(h["fully_async/staleness/max"] for h in history) <= staleness
    if staleness == 0:
        assert sum(h["trajectory_filter/dropped_stale"] for h in history) == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}  # the rollouter was stopped


class CrashingRunner:
    async def run(self, specs, temperature, on_done=None):
        raise OSError("worker bug")


async def test_a_crashing_runner_stops_the_run_instead_of_hanging(tmp_path, monkeypatch):
    cfg = load_config(None, ["async_training.enabled=true", f"run.output_dir={tmp_path}"])
    with pytest.raises(RuntimeError, match="trial runner crashed"):
        await run_async_steps(tmp_path, monkeypatch, cfg, CrashingRunner(), FakeSync())
