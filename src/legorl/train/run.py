"""Assemble a training run from its config: runtime, actor, trainer, worker, loop."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from legorl.agents.base import ScaffoldLimits
from legorl.config import RunConfig
from legorl.ops.progress import PhaseProgress
from legorl.runtime.inprocess import InProcessRuntime
from legorl.serving.weight_sync import WeightSync
from legorl.tasks import load_tasks, split_tasks
from legorl.tasks.model import Task
from legorl.train.actor import Actor
from legorl.train.critic import Critic
from legorl.train.loop import RunPaths, SyncLoop
from legorl.train.trainer import StepTrainer
from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import ProxyEndpoints
from legorl.workers.types import TrialResult, TrialSpec
from legorl.workers.worker import AgentLoopWorker


def load_task_split(cfg: RunConfig) -> tuple[list[Task], list[Task]]:
    tasks = load_tasks(cfg.tasks.train)
    if cfg.tasks.include:
        import fnmatch

        tasks = [t for t in tasks if any(fnmatch.fnmatchcase(t.id, g) for g in cfg.tasks.include)]
        if not tasks:
            raise ValueError(f"tasks.include {cfg.tasks.include} matches no task in {cfg.tasks.train}")
    if cfg.tasks.val is not None:
        return tasks, load_tasks(cfg.tasks.val)
    return split_tasks(tasks, cfg.tasks.val_fraction, seed=cfg.tasks.split_seed)


class WorkerRunner:
    """Runs a batch of trials through an AgentLoopWorker against the run's proxy."""

    def __init__(self, cfg: RunConfig, runtime: InProcessRuntime, paths: RunPaths):
        self.cfg = cfg
        self.endpoints = ProxyEndpoints(runtime.proxy)
        self.paths = paths

    async def run(self, specs: list[TrialSpec], temperature: float, tag: str,
                  on_done: Callable[[TrialResult], None]) -> list[TrialResult]:
        r = self.cfg.rollout
        limits = ScaffoldLimits(max_turns=r.max_turns, max_tokens_per_call=r.max_response_len,
                                temperature=temperature, top_p=r.top_p)
        wc = WorkerConfig(
            scaffold=r.agent, scaffold_kwargs=dict(r.agent_kwargs), limits=limits, backend=r.sandbox,
            max_trials=r.concurrency, max_sandboxes=r.concurrency, max_scaffolds=r.concurrency,
            agent_timeout_sec=r.agent_timeout_sec, verifier_timeout_sec=r.verifier_timeout_sec,
            output_root=self.paths.root, exp_name=self.cfg.run.name,
        )
        return await AgentLoopWorker(wc, self.endpoints).run_trials(specs, on_result=on_done)


def build_actor(cfg: RunConfig, model_dir: Path) -> tuple[Actor, Critic | None]:
    """The trainable policy (with a frozen reference when KL is on, R3 for MoE) and the critic for GAE."""
    from transformers import AutoModelForCausalLM

    from legorl.models.moe import is_moe

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    ref = None
    if cfg.algorithm.kl_coef > 0:
        ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        ref.requires_grad_(False)
    moe = is_moe(model)
    r3 = moe if cfg.model.enable_r3 is None else cfg.model.enable_r3
    if r3 and not moe:
        raise NotImplementedError("model.enable_r3=true needs an MoE model; this model is dense")
    actor = Actor(model, cfg.trainer, cfg.algorithm, cfg.rollout.temperature, ref, enable_r3=r3)
    critic = None
    if cfg.algorithm.adv_estimator == "gae":
        critic = Critic(str(model_dir), cfg.trainer.critic_lr, cfg.trainer.max_grad_norm, cfg.trainer.micro_batch_size)
    return actor, critic


async def train(cfg: RunConfig, resume: bool = False, overwrite: bool = False,
                on_line: Callable[[str], None] = print, progress: bool = True) -> list[dict]:
    paths = RunPaths(Path(cfg.run.output_dir) / cfg.run.name)
    paths.root.mkdir(parents=True, exist_ok=True)
    (paths.root / "config.json").write_text(cfg.model_dump_json(indent=2))
    train_tasks, val_tasks = load_task_split(cfg)
    on_line(f"tasks: {len(train_tasks)} train, {len(val_tasks)} val; run dir {paths.root}")
    runtime: Any
    if cfg.rollout.runtime == "ray":
        from legorl.runtime.ray_runtime import RayRuntime

        runtime = await RayRuntime.start(cfg, paths.root)
    else:
        runtime = await InProcessRuntime.start(cfg)
    try:
        actor, critic = build_actor(cfg, runtime.model_dir)
        pad = runtime.tokenizer.pad_token_id or 0  # type: ignore[attr-defined]
        loop: SyncLoop
        runner = runtime.runner if cfg.rollout.runtime == "ray" else WorkerRunner(cfg, runtime, paths)
        if cfg.rollout.train_mode == "async":
            from legorl.train.async_run import make_async_loop

            loop = make_async_loop(cfg, runtime, actor, critic, pad, train_tasks, val_tasks, runner, paths,
                                   on_line=on_line)
        else:
            step_trainer = StepTrainer(cfg, actor, WeightSync(runtime.engines), critic, pad_id=pad)
            loop = SyncLoop(cfg, train_tasks, val_tasks, runner, step_trainer, paths,
                            on_line=on_line, progress=PhaseProgress(enabled=progress))
        await loop.prepare(resume=resume, overwrite=overwrite)
        return await loop.run()
    finally:
        await runtime.close()
