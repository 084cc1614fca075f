"""What keeps async from starving on a long tail: groups that can no longer train within the bound are
cancelled at once (their slots and admission go to fresh groups), and a batch takes the oldest ready
groups first (so a group at the edge of the bound trains instead of being dropped)."""

from __future__ import annotations

import asyncio

from _async_fakes import FakeRuntime, FakeTrainer
from test_staleness_property import TASKS, Sync

from legorl.config import load_config
from legorl.ops.metrics import MetricsLogger
from legorl.rundir import RunDir
from legorl.train import loop
from legorl.train.buffer import RolloutBuffer
from legorl.train.sampler import TaskSampler
from legorl.train.steps import Start
from legorl.trial import TrialResult, TrialSpec, TrialTokens


def result(spec: TrialSpec, version: int) -> TrialResult:
    tokens = TrialTokens([1, 2], [0, 1], [0.0, -1.0], weight_versions=[-1, version])
    return TrialResult(TrialSpec(spec.task, spec.attempt, spec.group_id, trial_id=f"{spec.group_id}-{spec.attempt}"),
                       "failed", "", 0.0, tokens)


class TailRunner:
    """The very first trial never ends by itself (the long tail); every other one takes 5 ms."""

    def __init__(self, sync: Sync):
        self.sync, self.started, self.cancelled_at = sync, 0, None

    async def run(self, specs, temperature, on_done=None):
        for s in specs:
            first = self.started == 0
            self.started += 1
            v = self.sync.version
            try:
                await asyncio.sleep(3600 if first else 0.005)
            except asyncio.CancelledError:
                if first:
                    self.cancelled_at = self.sync.version
                raise
            await on_done(result(s, v))


async def test_a_group_past_the_bound_is_cancelled_not_waited_for(tmp_path, monkeypatch):
    cfg = load_config(None, ["async_training.enabled=true", "async_training.staleness_threshold=1",
                             "rollout.concurrency=4", "trainer.train_batch_size=1", "trainer.total_steps=4",
                             "algorithm.n_resp_per_prompt=2", f"run.output_dir={tmp_path}"])
    monkeypatch.setattr(loop, "learn", lambda trainer, kept: {})
    monkeypatch.setattr(loop, "save", lambda *a, **kw: None)
    sync = Sync()
    runner = TailRunner(sync)
    run_dir = RunDir(tmp_path / "r", "r")
    logged: list[dict] = []
    await asyncio.wait_for(loop._async_steps(cfg, run_dir, FakeRuntime(runner), FakeTrainer(), sync, TaskSampler(TASKS), [],
                                             Start(1, MetricsLogger(run_dir.logs, run_dir.name, sinks=[])),
                                             lambda step, m: logged.append(m), None), 30)
    assert len(logged) == 4
    # the stuck trial (started at version 0) was cancelled once the actor reached version 2, not at the end
    assert runner.cancelled_at == 2
    assert logged[-1]["fully_async/rollouter/cancelled_stale_groups"] == 1.0
    assert max(m["fully_async/staleness/max"] for m in logged) <= 1


async def test_a_batch_takes_the_oldest_ready_groups_first():
    buf = RolloutBuffer(staleness_threshold=1)
    spec = TrialSpec(TASKS[0], 0, "x")
    for gid, v in (("new", 2), ("edge", 1), ("newer", 2)):
        buf.expect(gid, 1)
        await buf.add(result(TrialSpec(spec.task, 0, gid), v))
    got, stats = await buf.get_batch(1, actor_version=2)
    assert [r.group_id for r in got] == ["edge"] and stats.staleness == [1]
    got, _ = await buf.get_batch(2, actor_version=2)
    assert [r.group_id for r in got] == ["new", "newer"]  # completion order among equals
