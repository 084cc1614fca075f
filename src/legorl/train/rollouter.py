"""The fully-async rollouter: trials stream into the buffer while the trainer consumes it.

It keeps `rollout.concurrency` trials running: it starts a GRPO group (the n attempts of a task)
whenever a slot is free, and each trial takes its own slot, so a slow member never holds the
others' slots (the long-tail cost of sync mode); finished trials land in the `RolloutBuffer`, which
releases complete groups only.

Staleness, in weight versions (`async_training.staleness_threshold` = s): a trained group's lag is
the actor's version minus the oldest version of any of its policy tokens. Two mechanisms bound it:
1. admission: the rollouter starts at most `(v - v0 + s + 1) * train_batch_size` groups while the
   engines serve version v (plus one per group dropped), so it never runs further ahead than the
   bound allows; s = 0 with one update per sync is strict on-policy training (the rollouter idles
   while the trainer updates);
2. consumption: groups that still finish past the bound (a slow group overtaken by others) are
   dropped whole and counted in `trajectory_filter/dropped_stale`.

`async_training.rollout_waves` starts a whole batch of groups at once and the next batch only when
every trial of the previous one has finished: the one-step-off pipeline, kept as a baseline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from legorl.config.run import RunConfig
from legorl.train.buffer import BatchStats, RolloutBuffer
from legorl.train.sampler import TaskSampler
from legorl.train.steps import trial_specs
from legorl.trial import TrialResult, TrialSpec
from legorl.workers.runner import TrialRunner


@dataclass
class _Running:
    """A group in flight: its task, members finished, and the oldest version any member started under."""

    task: asyncio.Task
    size: int
    finished: int = 0
    first_version: int | None = None


class Rollouter:
    """See the module docstring. `served_version()` is the weight version the engines serve now."""

    def __init__(self, cfg: RunConfig, runner: TrialRunner, sampler: TaskSampler,
                 served_version: Callable[[], int], step: int):
        self.cfg = cfg
        self.runner = runner
        self.sampler = sampler
        self.served_version = served_version
        self.step = step  # the trainer's current step: tags new groups
        self.buffer = RolloutBuffer(cfg.async_training.staleness_threshold)
        self._base_version = served_version()
        self._started_groups = 0
        self._dropped_groups = 0
        self.inflight_trials = 0
        self.trials_done = 0
        self._group_tasks: set[asyncio.Task] = set()
        self._running: dict[str, _Running] = {}  # groups in flight
        self.cancelled_groups = 0
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(cfg.rollout.concurrency)
        self._failure: asyncio.Future | None = None  # a crash of a group's runner
        self._producer: asyncio.Task | None = None

    def start(self) -> None:
        self._failure = asyncio.get_running_loop().create_future()
        self._producer = asyncio.create_task(self._produce())

    def wake(self) -> None:
        """Re-check admission (after a weight sync or a consumed batch)."""
        self._wake.set()

    def _groups_per_start(self) -> int:
        return self.cfg.trainer.train_batch_size if self.cfg.async_training.rollout_waves else 1

    def _may_start(self) -> bool:
        if self.cfg.async_training.rollout_waves:
            room = self.inflight_trials == 0  # a wave starts once the previous one has finished
        else:
            room = self.inflight_trials < self.cfg.rollout.concurrency  # members past free slots queue on `_slots`
        ahead = self.served_version() - self._base_version + self.cfg.async_training.staleness_threshold + 1
        allowed = ahead * self.cfg.trainer.train_batch_size + self._dropped_groups
        return room and self._started_groups + self._groups_per_start() <= allowed

    async def _produce(self) -> None:
        n = self.cfg.algorithm.n_resp_per_prompt
        while True:
            while not self._may_start():
                self._wake.clear()
                await self._wake.wait()
            for _ in range(self._groups_per_start()):
                self._start_group(n)

    def _start_group(self, n: int) -> None:
        task = self.sampler.next_batch(1)[0]
        specs = trial_specs([task], n, self.step, f"step_{self.step}_g{self._started_groups:05d}")
        gid = specs[0].group_id
        self.buffer.expect(gid, n)
        self._started_groups += 1
        self.inflight_trials += n
        t = asyncio.create_task(self._run_group(gid, specs))
        self._running[gid] = _Running(t, n)
        self._group_tasks.add(t)
        t.add_done_callback(self._group_tasks.discard)
        t.add_done_callback(lambda _t: self._running.pop(gid, None))

    def cancel_doomed(self, actor_version: int) -> int:
        """Cancel the groups in flight that can no longer be trained within the bound: a member got its
        slot (and so generated its first tokens) at a version more than `staleness_threshold` behind the
        actor, so the whole group would be dropped at consumption anyway. Their slots and admission go to
        fresh groups now instead of after the slowest member's tail. Returns how many were cancelled."""
        bound = self.cfg.async_training.staleness_threshold
        doomed = [g for g in self._running.values()
                  if g.first_version is not None and actor_version - g.first_version > bound
                  and g.finished < g.size and not g.task.done()]
        for g in doomed:
            g.task.cancel()
            self.inflight_trials -= g.size - g.finished
            self._dropped_groups += 1  # its admission goes to a new group
            self.cancelled_groups += 1
        if doomed:
            self._wake.set()
        return len(doomed)

    async def _run_group(self, gid: str, specs: list[TrialSpec]) -> None:
        group = self._running[gid]

        async def done(res: TrialResult) -> None:
            self.inflight_trials -= 1
            self.trials_done += 1
            group.finished += 1
            self._wake.set()
            await self.buffer.add(res)

        async def one(spec: TrialSpec) -> None:
            async with self._slots:  # one slot per trial: a finished trial frees its slot at once
                v = self.served_version()
                group.first_version = v if group.first_version is None else min(group.first_version, v)
                await self.runner.run([spec], self.cfg.rollout.temperature, done)

        try:
            await asyncio.gather(*(one(s) for s in specs))
        except asyncio.CancelledError:
            await self.buffer.abandon(gid)
            raise
        except Exception as exc:  # the worker turns trial failures into outcomes: this is a bug, stop the run
            if self._failure is not None and not self._failure.done():
                self._failure.set_exception(exc)

    async def next_batch(self, actor_version: int) -> tuple[list[TrialResult], BatchStats]:
        """The buffer's next `train_batch_size` groups; a crash in the rollouter surfaces here."""
        assert self._failure is not None and self._producer is not None, "call start() first"
        self.cancel_doomed(actor_version)
        get = asyncio.ensure_future(self.buffer.get_batch(self.cfg.trainer.train_batch_size, actor_version))
        await asyncio.wait({get, self._producer, self._failure}, return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            if self._failure.done():
                raise RuntimeError("a trial runner crashed") from self._failure.exception()
            self._producer.result()
            raise RuntimeError("the rollouter stopped")
        results, stats = get.result()
        self._dropped_groups += stats.dropped_groups
        self._wake.set()
        return results, stats

    def metrics(self, trained: list[TrialResult]) -> dict[str, float]:
        spans = [len(set(r.policy_versions())) for r in trained]
        return {
            "fully_async/partial/partial_ratio": sum(s > 1 for s in spans) / max(len(spans), 1),
            "fully_async/rollouter/inflight_trials": float(self.inflight_trials),
            "fully_async/rollouter/ready_groups": float(self.buffer.ready_groups),
            "fully_async/rollouter/trials_done": float(self.trials_done),
            "fully_async/rollouter/cancelled_stale_groups": float(self.cancelled_groups),
        }

    async def stop(self) -> None:
        tasks = [t for t in (self._producer, *self._group_tasks) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
