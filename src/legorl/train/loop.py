"""The synchronous training loop: sample tasks -> trials -> rewards -> update -> weight sync.

Everything a killed run needs to continue is checkpointed every `save_freq` steps; `resume=True`
restarts from the newest checkpoint with the metrics files truncated to it, so no step is lost or
logged twice.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from legorl.config import RunConfig
from legorl.ops.metrics import MetricsLogger
from legorl.tasks.model import Task
from legorl.train.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from legorl.train.sampler import TaskSampler
from legorl.workers.filter import TrajectoryFilter
from legorl.workers.types import TrialResult, TrialSpec


class TrialRunner(Protocol):
    async def run(
        self, specs: list[TrialSpec], temperature: float, tag: str, on_done: Callable[[TrialResult], None]
    ) -> list[TrialResult]: ...


class RunDirExistsError(RuntimeError):
    pass


@dataclass
class RunPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def trials(self) -> Path:
        return self.root / "trials"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def outcome_metrics(results: list[TrialResult], prefix: str) -> dict[str, float]:
    n = max(len(results), 1)
    counts = Counter(r.outcome for r in results)
    m = {f"{prefix}/outcome/{k}": v / n for k, v in sorted(counts.items())}
    m[f"{prefix}/pass_rate"] = sum(1 for r in results if (r.reward or 0) >= 1.0) / n
    m[f"{prefix}/score/mean"] = sum((r.reward or 0.0) for r in results) / n
    m[f"{prefix}/turns/mean"] = sum(r.turns for r in results) / n
    return m


class SyncLoop:
    def __init__(self, cfg: RunConfig, train_tasks: list[Task], val_tasks: list[Task], runner: TrialRunner,
                 step_trainer: Any, paths: RunPaths, on_line: Callable[[str], None] = print,
                 progress: Any = None):
        self.cfg = cfg
        self.train_tasks = train_tasks
        self.val_tasks = val_tasks
        self.runner = runner
        self.trainer = step_trainer
        self.paths = paths
        self.sampler = TaskSampler(train_tasks, seed=cfg.run.seed)
        self.on_line = on_line
        self.progress = progress  # optional rich-like object with start(tag, total) / advance() / stop()
        self.start_step = 1
        self.logger: MetricsLogger | None = None
        self.filter = TrajectoryFilter()

    async def prepare(self, resume: bool, overwrite: bool) -> None:
        ckpt = latest_checkpoint(self.paths.checkpoints)
        if resume and ckpt is not None:
            actor = self.trainer.actor
            state = load_checkpoint(ckpt, actor.model, actor.optimizer, actor.scheduler)
            self.sampler.load_state_dict(state.data_state)
            if self.trainer.weight_sync is not None:
                await self.trainer.weight_sync.push(actor.full_state_dict(), state.weight_version)
            self.start_step = state.step + 1
            self.logger = MetricsLogger(self.paths.logs, self.cfg.run.name, resume_step=state.step,
                                        sinks=self._sinks())
            self.on_line(f"resumed from {ckpt} (step {state.step}, weight version {state.weight_version})")
            return
        if ckpt is not None and not overwrite and not resume:
            raise RunDirExistsError(
                f"{self.paths.root} already holds checkpoints: pass --resume to continue it, --overwrite to "
                "start over, or set run.name to a new name"
            )
        if overwrite:
            shutil.rmtree(self.paths.checkpoints, ignore_errors=True)
        seed_everything(self.cfg.run.seed)
        self.logger = MetricsLogger(self.paths.logs, self.cfg.run.name, sinks=self._sinks())

    def _sinks(self) -> list | None:
        """Config-named sinks; None falls back to $LEGORL_METRICS_SINKS."""
        if not self.cfg.run.metrics_sinks:
            return None
        from legorl.ops.sinks import make_sinks

        return make_sinks(self.cfg.run.metrics_sinks, self.paths.logs, self.cfg.run.name,
                          config=self.cfg.model_dump(mode="json"))

    def _specs(self, tasks: list[Task], n: int, step: int, tag: str) -> list[TrialSpec]:
        return [
            TrialSpec(task=t, attempt=j, group_id=f"{tag}:{t.id}", step=step, trial_id=f"{tag}-{i:03d}-{j}")
            for i, t in enumerate(tasks) for j in range(n)
        ]

    async def _collect(self, specs: list[TrialSpec], temperature: float, tag: str) -> list[TrialResult]:
        if self.progress is not None:
            self.progress.start(tag, len(specs))
        try:
            return await self.runner.run(specs, temperature, tag,
                                         lambda _r: self.progress.advance() if self.progress else None)
        finally:
            if self.progress is not None:
                self.progress.stop()

    async def validate(self, step: int) -> dict[str, float]:
        if not self.val_tasks:
            return {}
        t = self.cfg.trainer
        temp = t.val_temperature if t.val_temperature is not None else self.cfg.rollout.temperature
        results = await self._collect(self._specs(self.val_tasks, t.val_n, step, f"val_{step}"), temp, f"val_{step}")
        return outcome_metrics(results, "val")

    async def run(self) -> list[dict[str, Any]]:
        cfg, t = self.cfg, self.cfg.trainer
        assert self.logger is not None, "call prepare() first"
        history = []
        if t.val_before_train and self.start_step == 1:
            m = await self.validate(0)
            self.on_line(self.logger.log(0, m))
            history.append({"step": 0, **m})
        for step in range(self.start_step, t.total_steps + 1):
            t0 = time.perf_counter()
            tasks = self.sampler.next_batch(t.train_batch_size)
            specs = self._specs(tasks, cfg.algorithm.n_resp_per_prompt, step, f"step_{step}")
            results = await self._collect(specs, cfg.rollout.temperature, f"step_{step}")
            t_roll = time.perf_counter() - t0
            kept, fstats = self.filter(results)
            metrics = await self.trainer.step(kept)
            metrics.update(fstats.metrics("trajectory_filter/"))
            metrics["trajectory_filter/invalid_ratio"] = fstats.total_dropped / max(len(results), 1)
            metrics.update(outcome_metrics(results, "rollout"))
            metrics["timing/rollout_s"] = t_roll
            if t.test_freq and (step % t.test_freq == 0 or step == t.total_steps):
                metrics.update(await self.validate(step))
            metrics["timing/step_s"] = time.perf_counter() - t0
            # log first, then checkpoint: a kill in between re-runs this step after resume and the
            # truncated log gets its line once
            self.on_line(self.logger.log(step, metrics))
            history.append({"step": step, **metrics})
            if (t.save_freq and step % t.save_freq == 0) or step == t.total_steps:
                actor = self.trainer.actor
                version = self.trainer.weight_sync.version if self.trainer.weight_sync else step
                save_checkpoint(self.paths.checkpoints, TrainerState(step, self.sampler.state_dict(), version),
                                actor.full_state_dict(), actor.optimizer, actor.scheduler)
        self.logger.close()
        return history
