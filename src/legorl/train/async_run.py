"""Assemble the fully-async loop (`rollout.train_mode = "async"`) from the pieces `train()` built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from legorl.config import RunConfig
from legorl.serving.partial import PartialRolloutManager
from legorl.serving.weight_sync import WeightSync
from legorl.tasks.model import Task
from legorl.train.async_loop import AsyncLoop
from legorl.train.loop import RunPaths
from legorl.train.trainer import StepTrainer


def async_config(cfg: RunConfig) -> RunConfig:
    """Async trains on data from older weights: token-level importance correction unless set explicitly."""
    mode = cfg.effective_rollout_is()
    if mode == cfg.algorithm.rollout_is:
        return cfg
    return cfg.model_copy(update={"algorithm": cfg.algorithm.model_copy(update={"rollout_is": mode})})


def install_partial(runtime: Any) -> PartialRolloutManager:
    """Put a PartialRolloutManager between the proxy and the runtime's manager."""
    partial = PartialRolloutManager(runtime.manager)
    runtime.manager = partial
    runtime.proxy.manager = partial
    runtime.proxy.capture.manager = partial
    return partial


def make_async_loop(cfg: RunConfig, runtime: Any, actor: Any, critic: Any, pad_id: int, train_tasks: list[Task],
                    val_tasks: list[Task], runner: Any, paths: RunPaths,
                    on_line: Callable[[str], None] = print) -> AsyncLoop:
    cfg = async_config(cfg)
    local = hasattr(runtime, "proxy")  # the Ray runtime wraps its manager inside the rollout actor
    partial = install_partial(runtime) if cfg.rollout.partial_enabled and local else None
    trainer = StepTrainer(cfg, actor, None, critic, pad_id=pad_id)
    return AsyncLoop(cfg, train_tasks, val_tasks, runner, trainer, paths, on_line=on_line,
                     weight_sync=WeightSync(runtime.engines), partial=partial)
