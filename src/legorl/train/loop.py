"""One training run, top to bottom: `train(cfg)`.

    sync:   sample tasks -> run their trials -> filter -> update -> push weights -> log -> checkpoint
    async:  a Rollouter streams trials into the buffer; each step takes complete groups -> update ->
            push weights every `trigger_parameter_sync_step` updates -> log -> checkpoint

Everything a killed run needs to continue is checkpointed every `save_freq` steps; `resume=True`
restarts from the newest checkpoint with the metrics files truncated to it, so no step is lost or
logged twice. A step is logged before it is checkpointed: a kill in between re-runs the step after
resume and the truncated log gets its line once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from legorl.config.run import RunConfig
from legorl.models.store import resolve_model
from legorl.ops.looplag import LoopLagMonitor
from legorl.ops.progress import PhaseProgress
from legorl.rundir import RunDir
from legorl.runtime.types import Runtime
from legorl.serving.launch import default_threads_per_replica
from legorl.serving.weight_sync import WeightSync
from legorl.tasks.model import Task
from legorl.tasks.split import load_task_split
from legorl.train.budget import engine_budget, loop_budget, trial_budget
from legorl.train.build import build_trainer
from legorl.train.heap import ROLLOUT_MMAP_THRESHOLD, fix_mmap_threshold, memory_metrics
from legorl.train.rollouter import Rollouter
from legorl.train.sampler import TaskSampler
from legorl.train.steps import (
    Start,
    check_run_dir,
    checkpoint_due,
    collect,
    learn,
    push_weights,
    rollout_metrics,
    run_estimate,
    save,
    start_or_resume,
    sync_metrics,
    takes_a_step,
    training_trials,
    trial_specs,
    validate,
    validation_due,
    verifier_error_warning,
)
from legorl.train.types import Trainer
from legorl.train.warmstart import split_for_warm_start, warm_start, warm_start_metrics
from legorl.workers.filter import TrajectoryFilter


async def start_runtime(cfg: RunConfig, run_dir: RunDir, model: Any = None) -> Runtime:
    """The run's runtime; `model`: the trainer's model object, served by in-process replicas instead of a copy."""
    if cfg.cluster.runtime == "ray":
        from legorl.cluster.runtime import RayRuntime

        return await RayRuntime.start(cfg, run_dir)
    from legorl.runtime.inprocess import InProcessRuntime

    return await InProcessRuntime.start(cfg, run_dir, model)


def servable_model(cfg: RunConfig, trainer: Trainer) -> Any:
    """The trainer's model when the replicas can serve it (`serving.share_trainer_model`), else None: a dense
    model in this process (an MoE model gets the engine's own copy: the engine records routing on its model)."""
    from legorl.models.moe import is_moe

    model = getattr(getattr(trainer, "actor", None), "model", None)
    if not cfg.engines_serve_trainer_model() or model is None or is_moe(model):
        return None
    return model


async def train(cfg: RunConfig, resume: bool = False, overwrite: bool = False,
                on_line: Callable[[str], None] = print, progress: bool = True) -> list[dict[str, Any]]:
    """Run `cfg` to `trainer.total_steps`; returns one metrics dict per logged step."""
    t_start = time.perf_counter()
    run_dir = RunDir.of(cfg.run.output_dir, cfg.run.name)
    check_run_dir(run_dir, resume, overwrite)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    run_dir.config_json.write_text(cfg.model_dump_json(indent=2))
    train_tasks, val_tasks = load_task_split(cfg.tasks)
    on_line(f"tasks: {len(train_tasks)} train, {len(val_tasks)} val; run dir {run_dir.root}")
    model_dir = resolve_model(cfg.model.path)
    if cfg.warm_start.enabled:  # the run starts from the supervised warm start instead of model.path
        demo_tasks, rl_tasks = split_for_warm_start(cfg, train_tasks)
        if rl_tasks is not train_tasks:
            on_line(f"warm start: demonstrations of {len(demo_tasks)} training tasks; RL samples the other "
                    f"{len(rl_tasks)}")
        model_dir = await warm_start(cfg, run_dir, model_dir, demo_tasks, on_line)
        train_tasks = rl_tasks
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": str(model_dir)})})
    # the RL phase's threshold between updates (each update runs under 1 MiB: steps.learn, train/heap.py)
    fix_mmap_threshold(ROLLOUT_MMAP_THRESHOLD)
    trainer: Trainer | None = None
    served = None
    if cfg.engines_serve_trainer_model():  # built first: the replicas serve its model (serving.share_trainer_model)
        trainer = start_trainer(cfg, model_dir)
        served = servable_model(cfg, trainer)
    try:
        runtime = await start_runtime(cfg, run_dir, served)
    except BaseException:
        if trainer is not None:
            trainer.close()
        raise
    if served is not None:
        on_line(f"serving: {cfg.serving.n_replicas} replica(s) serve the trainer's own model "
                "(serving.share_trainer_model): one copy of the weights, a weight sync copies nothing")
    try:
        if trainer is None:
            trainer = start_trainer(cfg, model_dir)
        if (attach := getattr(runtime, "attach_trainer", None)) is not None:  # Ray: the collective transport
            attach(trainer)
        sync = WeightSync(runtime.engines, in_place=served is not None)
        sampler = TaskSampler.for_run(train_tasks, cfg)
        start, note = await start_or_resume(cfg, run_dir, trainer, sampler, runtime, sync, resume)
        if note:
            on_line(note)
        bar = PhaseProgress(enabled=progress)
        history: list[dict[str, Any]] = []

        first_step, val_s = start.step, None

        def log(step: int, metrics: dict[str, float]) -> None:
            nonlocal val_s
            estimate = None
            if step == 0:
                val_s = metrics.get("timing/val_s")
            elif step == first_step and step < cfg.trainer.total_steps:
                total, estimate = run_estimate(cfg, step, metrics, time.perf_counter() - t_start, val_s)
                metrics["timing/run_estimate_s"] = total
            on_line(start.logger.log(step, metrics))
            if estimate:
                on_line(estimate)
            if step > 0 and (warning := verifier_error_warning(metrics, cfg.rollout.verifier_error_warn_share)):
                on_line(start.logger.warn(step, warning))
            history.append({"step": step, **metrics})

        try:
            if start.step == 1:  # step 0: the warm start and the validation before training, when on
                first = warm_start_metrics(run_dir) if cfg.warm_start.enabled else {}
                if cfg.trainer.val_before_train:
                    first.update(await validate(runtime.runner, cfg, val_tasks, 0, bar))
                if first:
                    log(0, first)
            steps = _async_steps if cfg.async_training.enabled else _sync_steps
            await steps(cfg, run_dir, runtime, trainer, sync, sampler, val_tasks, start, log, bar)
        finally:
            start.logger.close()
        return history
    finally:
        if trainer is not None:
            trainer.close()
        await runtime.close()


def start_trainer(cfg: RunConfig, model_dir: Path) -> Trainer:
    """The run's trainer: in this process, `trainer.n_ranks` torch.distributed ranks beside it, or (Ray)
    that many rank actors placed by `cluster.trainer`."""
    if cfg.cluster.runtime == "ray":
        from legorl.cluster.trainer import RayTrainer

        return RayTrainer(cfg, model_dir)
    if cfg.trainer.n_ranks > 1:
        from legorl.train.ranks import TrainerRanks

        return TrainerRanks(cfg, model_dir, cfg.trainer.n_ranks)
    return build_trainer(cfg, model_dir)


Log = Callable[[int, dict[str, float]], None]


async def _sync_steps(cfg: RunConfig, run_dir: RunDir, runtime: Runtime, trainer: Trainer, sync: WeightSync,
                      sampler: TaskSampler, val_tasks: list[Task], start: Start, log: Log,
                      bar: PhaseProgress) -> None:
    """Roll out a batch, update on it, push the weights: every trial of a step sees the same weights."""
    trajectory_filter = TrajectoryFilter()
    lag = LoopLagMonitor().start()
    try:
        for step in range(start.step, cfg.trainer.total_steps + 1):
            t0 = time.perf_counter()
            tasks = sampler.next_batch(cfg.trainer.train_batch_size)
            tag = f"step_{step}"
            specs = trial_specs(tasks, cfg.algorithm.n_resp_per_prompt, step, tag)
            engines_before, _ = await runtime.engine_stats(), lag.take()  # (lag of the previous update: dropped)
            results = await collect(runtime.runner, specs, cfg.rollout.temperature, tag, bar)
            t_roll = time.perf_counter() - t0
            budget = {**engine_budget(engines_before, await runtime.engine_stats(), t_roll),
                      **trial_budget(results), **loop_budget(lag.take())}
            kept, fstats = trajectory_filter(results)
            shaped, shaping = training_trials(cfg, kept)
            # serving.free_kv_during_update: the KV pools' memory is the update's (kept when no step runs)
            async with runtime.updating() if takes_a_step(cfg.algorithm.filter_groups, shaped) else nullcontext():
                kv_held = sum(s.kv_bytes for s in await runtime.engine_stats())
                metrics = learn(trainer, shaped)
            metrics.update(shaping)
            metrics["perf/update_kv_gb"] = kv_held / 1e9  # what the replicas' KV pools held through the update
            if not metrics.get("actor/skipped"):
                metrics.update(sync_metrics(sync, await push_weights(runtime, sync, trainer)))
                metrics["weight_version"] = float(sync.version)
            metrics.update(rollout_metrics(results, fstats))
            metrics.update(sampler.observe(results))  # pass rates for tasks.sampling, mixed-group share
            metrics["timing/rollout_s"] = t_roll
            metrics.update(budget)
            metrics.update(await runtime.serving_metrics())
            if validation_due(cfg, step):
                metrics.update(await validate(runtime.runner, cfg, val_tasks, step, bar))
            metrics.update(memory_metrics())
            metrics["timing/step_s"] = time.perf_counter() - t0
            log(step, metrics)
            if checkpoint_due(cfg, step):
                save(run_dir, step, trainer, sampler, sync.version, cfg.trainer.max_checkpoints_to_keep)
    finally:
        await lag.stop()


def _trainer_threads(cfg: RunConfig) -> int | None:
    """Torch threads for the update while in-process embedded engines keep generating beside it:
    `async_training.trainer_threads`, else the cores they leave (at least 1), so trainer and engines do not
    oversubscribe the CPU. None: leave torch's."""
    import os

    if cfg.async_training.trainer_threads is not None:
        return cfg.async_training.trainer_threads or os.cpu_count() or 1
    s = cfg.serving
    if s.engine != "embedded" or s.placement != "thread" or cfg.cluster.runtime != "local":
        return None
    cores = os.cpu_count() or 1
    return max(1, cores - (s.threads_per_replica or default_threads_per_replica(s.n_replicas, cores)) * s.n_replicas)


def _learn_in_budget(threads: int | None, trainer: Trainer, kept: list) -> dict[str, float]:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)  # this worker thread's pool (the engine thread sets its own)
    return learn(trainer, kept)


async def _async_steps(cfg: RunConfig, run_dir: RunDir, runtime: Runtime, trainer: Trainer,
                       sync: WeightSync, sampler: TaskSampler, val_tasks: list[Task], start: Start, log: Log,
                       bar: PhaseProgress) -> None:
    """Trials keep streaming while the trainer updates (in a worker thread, so the proxy, scaffolds and
    verifiers keep running on this event loop); weights are pushed every `trigger_parameter_sync_step`
    updates, aborting in-flight generations when partial rollout resumes them."""
    every = cfg.async_training.trigger_parameter_sync_step
    mode = "abort" if cfg.async_training.partial_enabled else "wait"
    trajectory_filter = TrajectoryFilter()
    actor_version = sync.version
    rollouter = Rollouter(cfg, runtime.runner, sampler, lambda: sync.version, start.step)
    threads = _trainer_threads(cfg)
    rollouter.start()
    t_run = time.perf_counter()
    since_sync = 0
    lag = LoopLagMonitor().start()
    engines_before = await runtime.engine_stats()
    try:
        for step in range(start.step, cfg.trainer.total_steps + 1):
            rollouter.step = step
            t0 = time.perf_counter()
            results, bstats = await rollouter.next_batch(actor_version)
            t1 = time.perf_counter()
            kept, fstats = trajectory_filter(results)
            shaped, shaping = training_trials(cfg, kept)
            metrics = await asyncio.to_thread(_learn_in_budget, threads, trainer, shaped)
            metrics.update(shaping)
            actor_version += 1
            since_sync += 1
            if since_sync >= every or step == cfg.trainer.total_steps:
                metrics.update(sync_metrics(sync, await push_weights(runtime, sync, trainer, actor_version, mode)))
                rollouter.wake()
                since_sync = 0
            metrics["weight_version"] = float(sync.version)
            metrics["actor_version"] = float(actor_version)
            busy = time.perf_counter() - t1
            metrics.update(bstats.metrics())
            metrics.update(rollout_metrics(results, fstats))
            metrics.update(sampler.observe(results))
            metrics.update(rollouter.metrics(kept))
            counters = await runtime.partial_counters()
            if "resumed" in counters:
                metrics["fully_async/partial/resumed_total"] = float(counters["resumed"])
            metrics["fully_async/trainer/idle_s"] = bstats.wait_s
            metrics["fully_async/trainer/idle_ratio"] = bstats.wait_s / max(bstats.wait_s + busy, 1e-9)
            engines_now = await runtime.engine_stats()  # the step's budget: engines, trial phases, loop lag
            metrics.update(engine_budget(engines_before, engines_now, time.perf_counter() - t0))
            metrics.update(trial_budget(results))
            metrics.update(loop_budget(lag.take()))
            metrics.update(await runtime.serving_metrics())
            engines_before = engines_now
            if validation_due(cfg, step):
                metrics.update(await validate(runtime.runner, cfg, val_tasks, step, bar))
            metrics.update(memory_metrics())
            metrics["timing/step_s"] = time.perf_counter() - t0
            metrics["timing/wall_s"] = time.perf_counter() - t_run
            log(step, metrics)
            if checkpoint_due(cfg, step):
                save(run_dir, step, trainer, sampler, actor_version, cfg.trainer.max_checkpoints_to_keep)
    finally:
        await lag.stop()
        await rollouter.stop()
