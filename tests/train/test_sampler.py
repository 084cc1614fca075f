"""TaskSampler: epoch shuffles, and pass-rate sampling that skips dead tasks (pure, no model)."""

from __future__ import annotations

import json
from dataclasses import dataclass
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


@dataclass(frozen=True)
class KindTask:
    id: str
    kind: str

    @property
    def metadata(self) -> dict[str, str]:
        return {"kind": self.kind}


# 12 kinds x 3 tasks: 36 tasks, a few drawn a step, so a task is rarely drawn twice
KIND_TASKS = [KindTask(f"k{k}-{i}", f"k{k}") for k in range(12) for i in range(3)]


def _per_kind(**kw) -> TaskSampler[KindTask]:
    from legorl.config.run import RunConfig

    tasks = {"sampling": "pass_rate", "pass_rate_window": 4, "dead_task_weight": 0.25, "sample_by": "kind", **kw}
    return TaskSampler.for_run(KIND_TASKS, RunConfig.model_validate({"run": {"seed": 3}, "tasks": tasks}))


def test_per_kind_records_judge_tasks_never_drawn():
    s = _per_kind()
    assert (s.record_by, s.dead_weight) == ("kind", 0.25)
    s.observe(results("k0-0", [0.0] * 4))  # one group of one task of k0 ...
    s.observe(results("k1-2", [1.0, 1.0]))  # ... two of k1's (fewer than the window each, 4 together)
    s.observe(results("k1-1", [1.0, 1.0], group="g2"))
    s.observe(results("k2-0", [1.0, 0.0, 1.0, 1.0]))  # mixed: alive
    assert s.history == {"k0": [0.0] * 4, "k1": [1.0] * 4, "k2": [1.0, 0.0, 1.0, 1.0]}
    dead = {t.id for t in KIND_TASKS if s.dead(t)}
    assert dead == {"k0-0", "k0-1", "k0-2", "k1-0", "k1-1", "k1-2"}  # k0-1 and k1-0 were never drawn
    per_task = TaskSampler(KIND_TASKS, pass_rate=True, window=4, dead_weight=0.25)
    per_task.observe(results("k0-0", [0.0] * 4))
    assert [t.id for t in KIND_TASKS if per_task.dead(t)] == ["k0-0"]  # the default: per task, as before
    drawn = s.next_batch(36)  # one epoch
    m = s.observe([])
    assert sum(t.kind in ("k0", "k1") for t in drawn) < 6 and m["sampler/skipped"] > 0
    assert m["sampler/dead_values"] == 2 and m["sampler/judged_values"] == 3 and m["sampler/dead_tasks"] == 6
    assert m["sampler/dead_drawn"] == sum(t.kind in ("k0", "k1") for t in drawn)
    assert not {"sampler/dead_values", "sampler/dead_drawn"} & set(per_task.observe([]))


def _offers(s: TaskSampler, n: int) -> tuple[list, list]:
    """(the draws `next_batch(n)` looked at, in order; the ones it returned)."""
    epoch, index, order = s.epoch, s.index, [s.items[i] for i in s._order]
    drawn = s.next_batch(n)
    if s.epoch == epoch:
        return order[index:s.index], drawn
    assert s.epoch == epoch + 1
    return order[index:] + [s.items[i] for i in s._order][:s.index], drawn


def test_dead_kind_exploration_floor():
    """dead_task_weight 0.25: a dead kind is passed over at most 3 times in a row, its 4th draw is kept."""
    from collections import Counter

    s = _per_kind(dead_task_weight=0.25)
    for k in range(11):  # k0..k10 never solved (one group of one task each); k11 unknown
        s.observe(results(f"k{k}-0", [0.0] * 4))
    streak, longest, drawn_kinds = Counter(), 0, Counter()
    for _ in range(36 * 3):
        offered, (got,) = _offers(s, 1)
        assert offered[-1] == got
        for t in offered[:-1]:  # passed over
            assert s.dead(t)
            streak[t.kind] += 1
            longest = max(longest, streak[t.kind])
        streak[got.kind] = 0
        drawn_kinds[got.kind] += 1
    assert longest == 3  # the floor binds (the coin alone lets streaks run longer) and is never passed
    assert set(drawn_kinds) == {f"k{k}" for k in range(12)}  # every dead kind still drawn
    assert s.observe([])["sampler/dead_drawn"] == sum(n for k, n in drawn_kinds.items() if k != "k11")
    with pytest.raises(ValueError, match="dead_task_weight > 0"):
        _per_kind(dead_task_weight=0.0)


def test_per_kind_state_resumes_and_other_keys_start_afresh():
    s = _per_kind()
    for step in range(5):
        for t in s.next_batch(3):
            s.observe(results(t.id, [0.0 if t.kind < "k6" else 1.0] * 2, group=f"{step}-{t.id}"))
    assert s.passed or s.history
    state = json.loads(json.dumps(s.state_dict()))
    assert state["record_by"] == "kind"
    resumed = _per_kind()
    resumed.load_state_dict(state)
    assert (resumed.history, resumed.passed) == (s.history, s.passed)
    assert resumed.next_batch(30) == s.next_batch(30)
    per_task = TaskSampler(KIND_TASKS, pass_rate=True, window=4)
    per_task.load_state_dict(state)  # kind records are no task's: dropped, the position kept
    assert per_task.history == {} and (per_task.epoch, per_task.index) == (state["epoch"], state["index"])
    old = _per_kind()
    old.load_state_dict({"epoch": 0, "index": 2, "seed": 3, "history": {"k0-0": [0.0] * 4}})  # a per-task one
    assert old.history == {}


def test_sample_by_config():
    from legorl.config import load_config
    from legorl.config.run import RunConfig

    with pytest.raises(ValueError, match=r"tasks\.sample_by keys the pass-rate records: it needs tasks\.sampling"):
        load_config(None, ["tasks.sample_by=kind"])
    with pytest.raises(ValueError, match=r"tasks\.sample_by needs tasks\.dead_task_weight > 0"):
        load_config(None, ["tasks.sampling=pass_rate", "tasks.sample_by=kind", "tasks.dead_task_weight=0"])
    cfg = RunConfig.model_validate({"tasks": {"sampling": "pass_rate", "sample_by": "kidn"}})
    with pytest.raises(ValueError, match=r"tasks.sample_by='kidn': none of the 36 training tasks has it"):
        TaskSampler.for_run(KIND_TASKS, cfg)
    assert TaskSampler.for_run(KIND_TASKS, RunConfig.model_validate({"tasks": {"sampling": "pass_rate"}})).record_by is None
