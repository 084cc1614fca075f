"""Property: over random trial durations (heavy-tailed, seeded) and random async settings, no trained
rollout ever lags the actor by more than `async_training.staleness_threshold` weight versions, and the
loop never deadlocks. Checked from outside the loop: a spy on the update reads each trained trial's
oldest token version and the number of updates taken before it."""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path

import pytest
from _async_fakes import FakeRuntime, FakeTrainer

from legorl.config import load_config
from legorl.ops.metrics import MetricsLogger
from legorl.rundir import RunDir
from legorl.tasks.model import Task
from legorl.train import loop
from legorl.train.sampler import TaskSampler
from legorl.train.steps import Start
from legorl.trial import TrialResult, TrialSpec, TrialTokens

TASKS = [Task(id=f"t{i}", path=Path("/nonexistent"), instruction="x") for i in range(7)]


class Sync:
    """WeightSync's surface as the loop uses it (whole-state and streamed pushes)."""

    last_bytes = 0
    last_full_bytes = 0
    retries = 0

    def __init__(self) -> None:
        self.version = 0

    async def push(self, state, version=None, mode="wait") -> int:
        await asyncio.sleep(0)
        self.version = self.version + 1 if version is None else version
        return self.version

    async def push_stream(self, produce, version=None, mode="wait") -> int:
        produce(lambda _bucket: None)
        return await self.push({}, version, mode)


class Runner:
    """Each trial makes `turns` generations spread over a lognormal duration; each generation's tokens
    carry the version served when it ran (as partial rollout records them)."""

    def __init__(self, sync: Sync, rng: random.Random, turns: int):
        self.sync, self.rng, self.turns = sync, rng, turns

    async def run(self, specs, temperature, on_done=None):
        for s in specs:
            duration = 0.002 * math.exp(self.rng.gauss(0.0, 1.0))  # median 2 ms, p99 ~ 20 ms
            versions: list[int] = []
            for _ in range(self.turns):
                await asyncio.sleep(duration / self.turns)
                versions += [self.sync.version] * 2
            n = len(versions)
            tokens = TrialTokens([1] * (n + 1), [0] + [1] * n, [0.0] * (n + 1), weight_versions=[-1, *versions])
            await on_done(TrialResult(TrialSpec(s.task, s.attempt, s.group_id, trial_id=f"{s.group_id}-{s.attempt}"),
                                      "failed", "", 0.0, tokens))


@pytest.mark.parametrize("seed", range(16))
async def test_staleness_bound_holds_over_random_trial_durations(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    s = rng.randint(0, 3)
    k = rng.randint(1, s + 1)
    batch, n, steps = rng.randint(1, 3), rng.randint(2, 3), 8
    keys = ["async_training.enabled=true", f"async_training.staleness_threshold={s}",
            f"async_training.trigger_parameter_sync_step={k}",
            f"async_training.partial_rollout={str(rng.random() < 0.7).lower()}",
            f"async_training.rollout_waves={str(rng.random() < 0.3).lower()}",
            f"rollout.concurrency={rng.randint(1, 3 * batch * n)}", f"trainer.train_batch_size={batch}",
            f"trainer.total_steps={steps}", f"algorithm.n_resp_per_prompt={n}", f"run.output_dir={tmp_path}"]
    cfg = load_config(None, keys)
    sync = Sync()
    trained: list[tuple[int, int]] = []  # (actor version before the update, oldest token version)
    updates = [0]

    def learn(trainer, kept):
        trained.extend((updates[0], min(r.policy_versions())) for r in kept)
        updates[0] += 1
        import time

        time.sleep(rng.uniform(0.0, 0.01))
        return {}

    monkeypatch.setattr(loop, "learn", learn)
    monkeypatch.setattr(loop, "save", lambda *a, **kw: None)
    run_dir = RunDir(tmp_path / "r", "r")
    start = Start(1, MetricsLogger(run_dir.logs, run_dir.name, sinks=[]))
    logged: list[dict] = []
    runtime = FakeRuntime(Runner(sync, rng, rng.randint(1, 3)))
    await asyncio.wait_for(loop._async_steps(cfg, run_dir, runtime, FakeTrainer(), sync, TaskSampler(TASKS, seed=seed), [], start,
                                             lambda step, m: logged.append(m), None), 60)
    assert len(logged) == steps and updates[0] == steps
    assert len(trained) >= steps * batch * n  # every update saw a full batch of complete groups
    lags = [actor - oldest for actor, oldest in trained]
    assert max(lags) <= s, (keys, lags)
    assert min(lags) >= 0
    assert max(m["fully_async/staleness/max"] for m in logged) <= s
