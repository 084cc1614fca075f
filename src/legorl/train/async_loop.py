"""The fully-async training loop: trials stream into a buffer while the trainer consumes it.

A rollouter task keeps `rollout.concurrency` trials running: it starts a GRPO group (the n
attempts of a task) whenever a slot is free, and each trial takes its own slot, so a slow member
never holds the others' slots (the long-tail cost of sync mode); finished trials land in the `RolloutBuffer`, which releases complete groups
only. The trainer takes `train_batch_size` groups, updates the actor in a worker thread (so the
proxy, the scaffolds and the verifiers keep running on the event loop meanwhile) and every
`trigger_parameter_sync_step` updates pushes the weights to the engines. With partial rollout the
push aborts in-flight generations, which `PartialRolloutManager` resumes under the new weights.

Staleness, in weight versions (`rollout.staleness_threshold` = s): a trained group's lag is the
actor's version minus the oldest version of any of its policy tokens. Two mechanisms bound it:
1. admission: the rollouter starts at most `(v - v0 + s + 1) * train_batch_size` groups while the
   engines serve version v (plus one per group dropped), so it never runs further ahead than the
   bound allows; s = 0 with one update per sync is strict on-policy training (the rollouter idles
   while the trainer updates);
2. consumption: groups that still finish past the bound (a slow group overtaken by others) are
   dropped whole and counted in `trajectory_filter/dropped_stale`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from legorl.serving.buffer import RolloutBuffer, policy_versions
from legorl.serving.partial import PartialRolloutManager
from legorl.serving.weight_sync import WeightSync
from legorl.train.checkpoint import TrainerState, save_checkpoint
from legorl.train.loop import SyncLoop, outcome_metrics
from legorl.workers.types import TrialResult, TrialSpec


class AsyncLoop(SyncLoop):
    """See the module docstring. `step_trainer.weight_sync` must be None: this loop owns the sync."""

    def __init__(self, *args: Any, weight_sync: WeightSync, partial: PartialRolloutManager | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.trainer.weight_sync is not None:
            raise ValueError("AsyncLoop syncs weights itself: build the StepTrainer with weight_sync=None")
        self.weight_sync = weight_sync
        self.partial = partial
        r = self.cfg.rollout
        self.buffer = RolloutBuffer(r.staleness_threshold)
        self.actor_version = weight_sync.version
        self._base_version = weight_sync.version
        self._started_groups = 0
        self._dropped_groups = 0
        self._inflight_trials = 0
        self._group_tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(r.concurrency)
        self._failure: asyncio.Future | None = None  # set in run(): a crash of a group's runner
        self._cur_step = self.start_step
        self.trials_done = 0

    async def prepare(self, resume: bool, overwrite: bool) -> None:
        self.trainer.weight_sync = self.weight_sync  # the base class pushes resumed weights through it
        try:
            await super().prepare(resume, overwrite)
        finally:
            self.trainer.weight_sync = None
        self.actor_version = self._base_version = self.weight_sync.version
        self._cur_step = self.start_step

    # -- rollouter ----------------------------------------------------------------------------------
    def _may_start(self, n: int) -> bool:
        r = self.cfg.rollout
        room = self._inflight_trials < r.concurrency  # members past the free slots queue on `_slots`
        ahead = self.weight_sync.version - self._base_version + r.staleness_threshold + 1
        allowed = ahead * self.cfg.trainer.train_batch_size + self._dropped_groups
        return room and self._started_groups < allowed

    async def _produce(self) -> None:
        n = self.cfg.algorithm.n_resp_per_prompt
        while True:
            while not self._may_start(n):
                self._wake.clear()
                await self._wake.wait()
            task = self.sampler.next_batch(1)[0]
            tag = f"g{self._started_groups:05d}"
            spec = self._specs([task], n, self._cur_step, f"step_{self._cur_step}_{tag}")
            gid = spec[0].group_id
            self.buffer.expect(gid, n)
            self._started_groups += 1
            self._inflight_trials += n
            t = asyncio.create_task(self._run_group(gid, spec))
            self._group_tasks.add(t)
            t.add_done_callback(self._group_tasks.discard)

    async def _run_group(self, gid: str, specs: list[TrialSpec]) -> None:
        async def done(res: TrialResult) -> None:
            self._inflight_trials -= 1
            self.trials_done += 1
            self._wake.set()
            await self.buffer.add(res)

        async def one(spec: TrialSpec) -> None:
            async with self._slots:  # one slot per trial: a finished trial frees its slot at once
                await self.runner.run([spec], self.cfg.rollout.temperature, gid, done)

        try:
            await asyncio.gather(*(one(s) for s in specs))
        except asyncio.CancelledError:
            await self.buffer.abandon(gid)
            raise
        except Exception as exc:  # the worker turns trial failures into outcomes: this is a bug, stop the run
            if self._failure is not None and not self._failure.done():
                self._failure.set_exception(exc)

    async def _stop_rollouter(self, producer: asyncio.Task) -> None:
        producer.cancel()
        tasks = [producer, *self._group_tasks]
        for t in self._group_tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- trainer ------------------------------------------------------------------------------------
    async def _sync(self) -> float:
        t0 = time.perf_counter()
        state = self.trainer.actor.full_state_dict()
        mode = "abort" if self.cfg.rollout.partial_enabled else "wait"
        if self.partial is not None:
            async with self.partial.syncing():
                await self.weight_sync.push(state, self.actor_version, mode=mode)
        else:  # no partial manager here: none, or it lives with the engines (Ray) and brackets the sync there
            await self.weight_sync.push(state, self.actor_version, mode=mode)
        self._wake.set()
        return time.perf_counter() - t0

    async def _train(self, rollouts: list) -> dict[str, float]:
        """StepTrainer.step in a worker thread with its own event loop: the main loop keeps serving."""
        return await asyncio.to_thread(asyncio.run, self.trainer.step(rollouts))

    def _rollout_metrics(self, results: list[TrialResult], kept: list) -> dict[str, float]:
        trained = {id(r) for r in kept}
        spans = [len(set(policy_versions(r))) for r in results if id(r.rollout) in trained]
        m = {
            "fully_async/partial/partial_ratio": sum(s > 1 for s in spans) / max(len(spans), 1),
            "fully_async/rollouter/inflight_trials": float(self._inflight_trials),
            "fully_async/rollouter/ready_groups": float(self.buffer.ready_groups),
            "fully_async/rollouter/trials_done": float(self.trials_done),
        }
        if self.partial is not None:
            m["fully_async/partial/resumed_total"] = float(self.partial.resumed)
        return m

    async def _next_batch(self, producer: asyncio.Task) -> tuple[list[TrialResult], Any]:
        """The buffer's next batch; a crash in the rollouter surfaces here instead of hanging the trainer."""
        assert self._failure is not None
        get = asyncio.ensure_future(self.buffer.get_batch(self.cfg.trainer.train_batch_size, self.actor_version))
        await asyncio.wait({get, producer, self._failure}, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            if self._failure.done():
                raise RuntimeError("a trial runner crashed") from self._failure.exception()
            producer.result()
            raise RuntimeError("the rollouter stopped")
        return get.result()

    async def run(self) -> list[dict[str, Any]]:
        t = self.cfg.trainer
        assert self.logger is not None, "call prepare() first"
        history: list[dict[str, Any]] = []
        if t.val_before_train and self.start_step == 1:
            m = await self.validate(0)
            self.on_line(self.logger.log(0, m))
            history.append({"step": 0, **m})
        t_run = time.perf_counter()
        self._failure = asyncio.get_running_loop().create_future()
        producer = asyncio.create_task(self._produce())
        since_sync = 0
        try:
            for step in range(self.start_step, t.total_steps + 1):
                self._cur_step = step
                t0 = time.perf_counter()
                results, bstats = await self._next_batch(producer)
                self._dropped_groups += bstats.dropped_groups
                self._wake.set()
                t1 = time.perf_counter()
                kept, fstats = self.filter(results)
                metrics = await self._train(kept)
                self.actor_version += 1
                since_sync += 1
                if since_sync >= t.trigger_parameter_sync_step or step == t.total_steps:
                    metrics["timing/weight_sync_s"] = await self._sync()
                    since_sync = 0
                metrics["weight_version"] = float(self.weight_sync.version)
                metrics["actor_version"] = float(self.actor_version)
                busy = time.perf_counter() - t1
                metrics.update(bstats.metrics())
                metrics.update(fstats.metrics("trajectory_filter/"))
                metrics["trajectory_filter/invalid_ratio"] = fstats.total_dropped / max(len(results), 1)
                metrics.update(outcome_metrics(results, "rollout"))
                metrics.update(self._rollout_metrics(results, kept))
                metrics["fully_async/trainer/idle_s"] = bstats.wait_s
                metrics["fully_async/trainer/idle_ratio"] = bstats.wait_s / max(bstats.wait_s + busy, 1e-9)
                if t.test_freq and (step % t.test_freq == 0 or step == t.total_steps):
                    metrics.update(await self.validate(step))
                metrics["timing/step_s"] = time.perf_counter() - t0
                metrics["timing/wall_s"] = time.perf_counter() - t_run
                self.on_line(self.logger.log(step, metrics))
                history.append({"step": step, **metrics})
                if (t.save_freq and step % t.save_freq == 0) or step == t.total_steps:
                    actor = self.trainer.actor
                    save_checkpoint(self.paths.checkpoints,
                                    TrainerState(step, self.sampler.state_dict(), self.actor_version),
                                    actor.full_state_dict(), actor.optimizer, actor.scheduler)
        finally:
            await self._stop_rollouter(producer)
            self.logger.close()
        return history
