"""The pieces of a training step that the sync and async branches of `train()` share: trials in,
validation, learning from a batch, the weight push, metrics, checkpoints, start-or-resume."""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from legorl.config.run import RunConfig
from legorl.ops.metrics import MetricsLogger
from legorl.ops.progress import PhaseProgress
from legorl.rundir import RunDir
from legorl.runtime.types import Runtime
from legorl.serving.types import EngineClosedError, EngineError
from legorl.serving.weight_sync import WeightSync
from legorl.tasks.model import Task
from legorl.train.advantages import mixed_group_rows
from legorl.train.batch import collate, trainable
from legorl.train.checkpoint import TrainerState, latest_checkpoint, load_checkpoint, save_checkpoint
from legorl.train.heap import update_heap
from legorl.train.overlong import shape_overlong
from legorl.train.sampler import TaskSampler
from legorl.train.types import Trainer
from legorl.trial import TrialResult, TrialSpec
from legorl.workers.filter import FilterStats
from legorl.workers.runner import TrialRunner

log = logging.getLogger(__name__)


class RunDirExistsError(RuntimeError):
    pass


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# -- trials ---------------------------------------------------------------------------------------
def trial_specs(tasks: Sequence[Task], n: int, step: int, tag: str) -> list[TrialSpec]:
    """n attempts of each task; the attempts of one task form a group."""
    return [TrialSpec(task=t, attempt=j, group_id=f"{tag}:{t.id}", step=step, trial_id=f"{tag}-{i:03d}-{j}")
            for i, t in enumerate(tasks) for j in range(n)]


async def collect(runner: TrialRunner, specs: list[TrialSpec], temperature: float, tag: str,
                  progress: PhaseProgress | None) -> list[TrialResult]:
    """Run `specs` to the end, with a progress bar."""
    if progress is None:
        return await runner.run(specs, temperature)
    progress.start(tag, len(specs))
    try:
        return await runner.run(specs, temperature, lambda _r: progress.advance())
    finally:
        progress.stop()


async def validate(runner: TrialRunner, cfg: RunConfig, val_tasks: list[Task], step: int,
                   progress: PhaseProgress | None) -> dict[str, float]:
    """`val_n` attempts per held-out task at the validation temperature: `val/*` metrics."""
    if not val_tasks:
        return {}
    t = cfg.trainer
    temp = t.val_temperature if t.val_temperature is not None else cfg.rollout.temperature
    tag = f"val_{step}"
    t0 = time.perf_counter()
    results = await collect(runner, trial_specs(val_tasks, t.val_n, step, tag), temp, tag, progress)
    return {**outcome_metrics(results, "val"), "timing/val_s": time.perf_counter() - t0}


def run_estimate(cfg: RunConfig, step: int, metrics: dict[str, float], elapsed_s: float,
                 val_s: float | None) -> tuple[float, str]:
    """The whole run's wall time as seen after its first training step: what ran so far, the remaining
    steps at this step's pace (its validation left out), and the validations still due at `val_s` each."""
    step_s = metrics.get("timing/step_s", 0.0) - metrics.get("timing/val_s", 0.0)
    left = max(0, cfg.trainer.total_steps - step)
    vals = sum(1 for s in range(step + 1, cfg.trainer.total_steps + 1) if validation_due(cfg, s))
    val_each = metrics.get("timing/val_s", val_s or 0.0)
    total = elapsed_s + left * step_s + vals * val_each
    line = (f"estimate: the whole run takes ~{total / 60:.1f} min ({elapsed_s / 60:.1f} min so far, {left} more "
            f"steps x {step_s:.0f} s" + (f", {vals} validation(s) x {val_each:.0f} s" if vals else "") + ")")
    return total, line


# -- learning -------------------------------------------------------------------------------------
def training_trials(cfg: RunConfig, kept: list[TrialResult]) -> tuple[list[TrialResult], dict[str, float]]:
    """The kept trials with the rewards the update learns from (`algorithm.overlong_buffer`, train/overlong.py)
    and the shaping's metrics; the metrics of outcomes and the sampler read the verifier's rewards."""
    a = cfg.algorithm
    return shape_overlong(kept, cfg.rollout.max_response_len, a.overlong_buffer, a.overlong_penalty)


def takes_a_step(filter_groups: bool, kept: list[TrialResult]) -> bool:
    """Whether `learn` on `kept` reaches the optimizer: some trial carries policy tokens and, with
    `algorithm.filter_groups`, some group's rewards differ (the trainer drops the uniform ones). A synchronous
    loop frees the KV pools only for an update that runs."""
    rows = trainable(kept)
    if not rows or not filter_groups:
        return bool(rows)
    rewards = torch.tensor([float(r.reward or 0.0) for r in rows])  # as `collate` reads them
    return bool(mixed_group_rows(rewards, [r.group_id for r in rows]))


def learn(trainer: Trainer, kept: list[TrialResult]) -> dict[str, float]:
    """One update on the kept trials (those with policy tokens); `actor/skipped` when there are none."""
    rewards = [float(r.reward or 0.0) for r in kept]
    metrics = {
        "critic/score/mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "critic/score/max": max(rewards, default=0.0),
        "critic/score/min": min(rewards, default=0.0),
    }
    rows = trainable(kept)
    if not rows:
        metrics["actor/skipped"] = 1.0
        return metrics
    with update_heap():  # large buffers mmapped (the peak kept low), freed pages handed back on each side
        metrics.update(trainer.update(collate(rows, trainer.pad_id)))
    return metrics


async def push_weights(runtime: Runtime, sync: WeightSync, trainer: Trainer, version: int | None = None,
                       mode: Literal["wait", "abort"] = "wait") -> float:
    """The actor's weights to every replica (`version` None: the next one); returns seconds taken.
    With partial rollout (`mode="abort"`) the runtime resumes the generations the sync cut."""
    t0 = time.perf_counter()
    async with runtime.syncing():
        try:
            await sync.push_stream(trainer.stream_weights, version, mode=mode)
        except EngineClosedError:
            raise
        except EngineError as exc:
            # a replica failed mid-sync (a collective send that timed out, a server killed in the middle): it
            # refuses calls until it is whole again, and a second push gives it the whole model (a vLLM replica
            # by files, restarting its server if it died); a second failure ends the step
            log.warning("weight sync of version %s failed (%s): pushing it once more", version or sync.version + 1, exc)
            sync.retries += 1
            await sync.push_stream(trainer.stream_weights, version, mode=mode)
    await runtime.revive()  # a replica restarted since the last sync rejoins with these weights
    return time.perf_counter() - t0


def sync_metrics(sync: WeightSync, seconds: float) -> dict[str, float]:
    """The step's weight-sync figures: time, bytes sent to a replica, their share of the whole weights, retries."""
    return {"timing/weight_sync_s": seconds, "weight_sync/bytes": float(sync.last_bytes),
            "weight_sync/delta_share": sync.last_bytes / max(sync.last_full_bytes, 1),
            "weight_sync/retries": float(sync.retries)}


# -- metrics --------------------------------------------------------------------------------------
def outcome_metrics(results: list[TrialResult], prefix: str) -> dict[str, float]:
    n = max(len(results), 1)
    counts = Counter(r.outcome for r in results)
    m = {f"{prefix}/outcome/{k}": v / n for k, v in sorted(counts.items())}
    m[f"{prefix}/pass_rate"] = sum(1 for r in results if (r.reward or 0) >= 1.0) / n
    m[f"{prefix}/score/mean"] = sum((r.reward or 0.0) for r in results) / n
    m.update(turn_metrics(results, prefix))
    m.update(harness_metrics(results, prefix))
    return m


def harness_metrics(results: list[TrialResult], prefix: str) -> dict[str, float]:
    """A mixed-harness run's split (`agent.mix`): each harness's share of the trials, pass rate and policy tokens
    per trial. Nothing when every trial ran the same harness."""
    by: dict[str, list[TrialResult]] = {}
    for r in results:
        by.setdefault(str(r.metadata.get("harness", "")), []).append(r)
    if len(by) < 2:
        return {}
    m: dict[str, float] = {}
    for name, rs in sorted(by.items()):
        key = f"{prefix}/harness/{name or 'unknown'}"
        m[f"{key}/share"] = len(rs) / len(results)
        m[f"{key}/pass_rate"] = sum(1 for r in rs if (r.reward or 0) >= 1.0) / len(rs)
        m[f"{key}/policy_tokens_mean"] = sum(r.tokens.num_policy_tokens for r in rs if r.tokens) / len(rs)
    return m


def turn_metrics(results: list[TrialResult], prefix: str) -> dict[str, float]:
    """How trials used their turns: whether the policy acts, looks before it acts, and how much of what
    it is trained on it wrote itself. Tool calls are the native calls the proxy parsed plus the builtin
    scaffold's text-protocol commands; parse failures are call-shaped text the proxy could not read
    (`parse_failure_rate`: of all attempted calls); `length_capped_share` is the share of model calls the engine
    stopped at `rollout.max_response_len`. `solved_multi_turn_share` is left out when nothing
    was solved (a 0 would claim the solved trials were single-turn)."""
    n = max(len(results), 1)
    calls = fails = model_calls = capped = 0
    for r in results:
        c = r.metadata.get("counters") or (r.tokens.capture.get("counters", {}) if r.tokens else {})
        calls += int(c.get("tool_calls", 0)) + int(r.metadata.get("scaffold_text_actions", 0))
        fails += int(c.get("tool_parse_failures", 0))
        model_calls += int(c.get("calls", 0))
        capped += int(c.get("length_capped", 0))
    policy = sum(r.tokens.num_policy_tokens for r in results if r.tokens is not None)
    tokens = sum(len(r.tokens.token_ids) for r in results if r.tokens is not None)
    m = {f"{prefix}/turns/mean": sum(r.turns for r in results) / n,
         f"{prefix}/turns/tool_calls_mean": calls / n,
         f"{prefix}/turns/parse_failures": float(fails),
         f"{prefix}/turns/parse_failure_rate": fails / max(calls + fails, 1),
         f"{prefix}/turns/response_mask_share": policy / max(tokens, 1),
         f"{prefix}/turns/length_capped_share": capped / max(model_calls, 1)}
    solved = [r for r in results if (r.reward or 0) >= 1.0]
    if solved:
        m[f"{prefix}/turns/solved_multi_turn_share"] = sum(r.turns >= 2 for r in solved) / len(solved)
    return m


def verifier_error_warning(metrics: dict[str, float], limit: float) -> str | None:
    """A warning when more than `limit` of a step's trials are `verifier_error`: those leave training data,
    and so many of them means the task set or the sandbox is broken, not the policy."""
    share = metrics.get("rollout/outcome/verifier_error", 0.0)
    if share <= limit:
        return None
    return (f"{share:.0%} of this step's trials are verifier_error (rollout.verifier_error_warn_share = "
            f"{limit:g}): they are dropped from training; the task set or sandbox is broken, not the policy. "
            "Read a trial's verifier.log, run `legorl doctor` on the run dir and the oracle on one task")


def rollout_metrics(results: list[TrialResult], fstats: FilterStats) -> dict[str, float]:
    """What the trajectory filter dropped and how the step's trials ended."""
    m = fstats.metrics("trajectory_filter/")
    m["trajectory_filter/invalid_ratio"] = fstats.total_dropped / max(len(results), 1)
    m.update(outcome_metrics(results, "rollout"))
    return m


# -- run directory, checkpoints -------------------------------------------------------------------
@dataclass
class Start:
    step: int  # the first step to run
    logger: MetricsLogger


def _sinks(cfg: RunConfig, run_dir: RunDir) -> list | None:
    """Config-named sinks; None falls back to $LEGORL_METRICS_SINKS."""
    if not cfg.run.metrics_sinks:
        return None
    from legorl.ops.sinks import make_sinks

    return make_sinks(cfg.run.metrics_sinks, run_dir.logs, run_dir.name, config=cfg.model_dump(mode="json"))


def check_run_dir(run_dir: RunDir, resume: bool, overwrite: bool) -> None:
    """Refuse to silently overwrite a run that has checkpoints (before anything expensive starts)."""
    if latest_checkpoint(run_dir.checkpoints) is not None and not (resume or overwrite):
        raise RunDirExistsError(
            f"{run_dir.root} already holds checkpoints: pass --resume to continue it, --overwrite to "
            "start over, or set run.name to a new name"
        )
    if overwrite and not resume:
        shutil.rmtree(run_dir.checkpoints, ignore_errors=True)


async def start_or_resume(cfg: RunConfig, run_dir: RunDir, trainer: Trainer, sampler: TaskSampler,
                          runtime: Runtime, sync: WeightSync, resume: bool) -> tuple[Start, str | None]:
    """Fresh: seed everything. Resume: the newest checkpoint's weights (pushed to the engines), optimizer,
    RNG and data position, with the metrics files truncated to its step. Returns the start and a note."""
    ckpt = latest_checkpoint(run_dir.checkpoints) if resume else None
    if ckpt is None:
        seed_everything(cfg.run.seed)
        if cfg.model.lora.enabled:  # step 1 samples with the adapter as initialised (a remote server: its only copy)
            await push_weights(runtime, sync, trainer, 0)
        return Start(1, MetricsLogger(run_dir.logs, run_dir.name, sinks=_sinks(cfg, run_dir))), None
    state = load_checkpoint(ckpt, trainer)
    sampler.load_state_dict(state.data_state)
    await push_weights(runtime, sync, trainer, state.weight_version)
    logger = MetricsLogger(run_dir.logs, run_dir.name, resume_step=state.step, sinks=_sinks(cfg, run_dir))
    return Start(state.step + 1, logger), f"resumed from {ckpt} (step {state.step}, weight version {state.weight_version})"


def checkpoint_due(cfg: RunConfig, step: int) -> bool:
    t = cfg.trainer
    return bool(t.save_freq and step % t.save_freq == 0) or step == t.total_steps


def save(run_dir: RunDir, step: int, trainer: Trainer, sampler: TaskSampler, weight_version: int,
         keep: int | None = None) -> None:
    save_checkpoint(run_dir.checkpoints, TrainerState(step, sampler.state_dict(), weight_version), trainer, keep)


def validation_due(cfg: RunConfig, step: int) -> bool:
    t = cfg.trainer
    return bool(t.test_freq) and (step % t.test_freq == 0 or step == t.total_steps)
