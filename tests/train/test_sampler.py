"""TaskSampler: epoch shuffles, and pass-rate sampling that skips dead tasks (pure, no model)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from legorl.train.sampler import TaskSampler

TASKS = [f"t{i}" for i in range(10)]


def results(task: str, rewards: list[float | None], group: str | None = None) -> list[SimpleNamespace]:
    return [SimpleNamespace(task_id=task, group_id=group or f"g-{task}", reward=r) for r in rewards]


def test_uniform_epochs_have_every_task_once():
    s = TaskSampler(TASKS, seed=3)
    first, second = s.next_batch(10), s.next_batch(10)
    assert sorted(first) == sorted(TASKS) == sorted(second) and first != second
    assert TaskSampler(TASKS, seed=3).next_batch(10) == first


def test_uniform_ignores_pass_rates():
    s, plain = TaskSampler(TASKS, seed=1), TaskSampler(TASKS, seed=1)
    for t in TASKS[:5]:
        s.observe(results(t, [1.0] * 8))
    assert s.next_batch(25) == plain.next_batch(25)


def test_mixed_group_share():
    s = TaskSampler(TASKS)
    m = s.observe([*results("t0", [0.0, 1.0, 0.0]), *results("t1", [1.0, 1.0]), *results("t2", [0.0, None, 0.0]),
                   *results("t3", [None, None])])
    assert m == {"grpo/mixed_group_share": pytest.approx(1 / 3)}  # t3 has no scored trial: not a group
    assert s.history == {"t0": [0.0, 1.0, 0.0], "t1": [1.0, 1.0], "t2": [0.0, 0.0]}


def test_pass_rate_skips_dead_tasks():
    s = TaskSampler(TASKS, seed=0, pass_rate=True, window=4, dead_weight=0.0)
    dead = TASKS[:6]
    for t in dead:
        s.observe(results(t, [0.0, 0.0] if t < "t3" else [1.0, 1.0]))
        s.observe(results(t, [0.0, 0.0] if t < "t3" else [1.0, 1.0]))
    s.observe(results("t6", [1.0, 0.0, 1.0, 0.0]))  # mixed: alive
    s.observe(results("t7", [1.0, 1.0, 1.0]))  # fewer than `window` attempts: not judged yet
    assert [s.dead(t) for t in TASKS] == [True] * 6 + [False] * 4
    drawn = s.next_batch(12)
    assert set(drawn) == {"t6", "t7", "t8", "t9"} and s.skipped > 0
    m = s.observe([])
    assert m["sampler/dead_tasks"] == 6 and m["sampler/skipped"] > 0 and s.skipped == 0
    s.observe(results("t0", [1.0]))  # one success: its last 4 rewards are mixed again
    assert not s.dead("t0")


def test_dead_weight_revisits_some_and_is_deterministic():
    def run() -> list[str]:
        s = TaskSampler(TASKS, seed=7, pass_rate=True, window=2, dead_weight=0.25)
        for t in TASKS[:8]:
            s.observe(results(t, [0.0, 0.0]))
        return s.next_batch(40)

    a = run()
    assert a == run()
    revisits = sum(t in TASKS[:8] for t in a)
    assert 10 <= revisits <= 28, revisits  # per epoch 2 alive + ~8 x 0.25 dead: ~half, against 32 of 40 uniform


def test_all_dead_still_fills_a_batch():
    s = TaskSampler(TASKS[:3], pass_rate=True, window=1, dead_weight=0.0)
    for t in TASKS[:3]:
        s.observe(results(t, [1.0]))
    assert len(s.next_batch(5)) == 5


def test_state_dict_resumes_the_same_draws():
    s = TaskSampler(TASKS, seed=2, pass_rate=True, window=3, dead_weight=0.2)
    for step in range(4):
        for t in s.next_batch(3):
            s.observe(results(t, [float(step % 2)] * 3))
    state = json.loads(json.dumps(s.state_dict()))  # checkpoints store it as JSON
    resumed = TaskSampler(TASKS, seed=0, pass_rate=True, window=3, dead_weight=0.2)
    resumed.load_state_dict(state)
    assert resumed.history == s.history
    assert resumed.next_batch(20) == s.next_batch(20)


def test_old_state_dicts_load():
    s = TaskSampler(TASKS, pass_rate=True)
    s.load_state_dict({"epoch": 1, "index": 4, "seed": 5})
    assert s.history == {} and len(s.next_batch(3)) == 3


def test_for_run_reads_the_tasks_section():
    from legorl.config.run import RunConfig

    cfg = RunConfig.model_validate({"run": {"seed": 4}, "tasks": {"sampling": "pass_rate", "pass_rate_window": 5,
                                                                  "dead_task_weight": 0.0}})
    s = TaskSampler.for_run(TASKS, cfg)
    assert (s.seed, s.pass_rate, s.window, s.dead_weight) == (4, True, 5, 0.0)
    assert not TaskSampler.for_run(TASKS, RunConfig()).pass_rate



class RewardRunner:
    """Trials without sandboxes: t0 always passes, t1 and t2 always fail, the rest alternate."""

    def __init__(self):
        self.seen: list[list[str]] = []

    async def run(self, specs, temperature, on_done=None):
        from legorl.trial import TrialResult, TrialTokens

        self.seen.append(sorted({s.task.id for s in specs}))
        out = []
        for s in specs:
            r = 1.0 if s.task.id == "t0" else 0.0 if s.task.id in ("t1", "t2") else float(s.attempt % 2)
            out.append(TrialResult(s, "passed" if r else "failed", "", r, TrialTokens([1, 2], [0, 1], [0.0, -1.0])))
        return out


def test_sync_loop_feeds_the_sampler(tmp_path, monkeypatch):
    """Through the sync loop (fake trials, no model): results reach the sampler, the step line carries the
    mixed-group share and the dead-task count, dead tasks stop being drawn, and the checkpoint keeps the record."""
    import asyncio

    from _async_fakes import FakeRuntime, FakeTrainer
    from test_staleness_property import TASKS as TASK_OBJS
    from test_staleness_property import Sync

    from legorl.config import load_config
    from legorl.ops.metrics import MetricsLogger
    from legorl.rundir import RunDir
    from legorl.train import loop
    from legorl.train.steps import Start

    cfg = load_config(None, ["tasks.sampling=pass_rate", "tasks.pass_rate_window=2", "tasks.dead_task_weight=0",
                             "trainer.train_batch_size=2", "trainer.total_steps=8", "algorithm.n_resp_per_prompt=2",
                             f"run.output_dir={tmp_path}"])
    saved: list[dict] = []
    monkeypatch.setattr(loop, "learn", lambda trainer, kept: {})
    monkeypatch.setattr(loop, "save", lambda run_dir, step, trainer, sampler, *a: saved.append(sampler.state_dict()))
    monkeypatch.setattr(loop, "checkpoint_due", lambda cfg, step: True)
    runner, sampler = RewardRunner(), TaskSampler.for_run(TASK_OBJS, cfg)
    run_dir = RunDir(tmp_path / "r", "r")
    logged: list[dict] = []
    asyncio.run(loop._sync_steps(cfg, run_dir, FakeRuntime(runner), FakeTrainer(), Sync(), sampler, [],
                                 Start(1, MetricsLogger(run_dir.logs, run_dir.name, sinks=[])),
                                 lambda step, m: logged.append(m), None))
    assert len(logged) == 8 and all("grpo/mixed_group_share" in m for m in logged)
    assert logged[-1]["sampler/dead_tasks"] == 3  # t0 (always 1), t1 and t2 (always 0)
    later = [t for step in runner.seen[4:] for t in step]  # after the first epoch (7 tasks, 2 per step)
    assert later and not {"t0", "t1", "t2"} & set(later) and logged[-1]["grpo/mixed_group_share"] == 1.0
    assert saved[-1]["history"]["t0"] == [1.0, 1.0] and saved[-1]["history"]["t1"] == [0.0, 0.0]
