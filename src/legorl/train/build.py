"""Build the trainer of a run from its config: the actor (with a frozen reference when KL is on, R3
for MoE), the critic for GAE, and the pad id from the model's tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from legorl.config.sections import RunConfig
from legorl.models.chat import load_tokenizer
from legorl.train.actor import Actor
from legorl.train.critic import Critic
from legorl.train.trainer import StepTrainer


def build_actor(cfg: RunConfig, model_dir: Path) -> tuple[Actor, Critic | None]:
    """The trainable policy and, for GAE, the critic."""
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
        t = cfg.trainer
        critic = Critic(str(model_dir), t.critic_lr, t.max_grad_norm, t.micro_batch_size)
    return actor, critic


def build_trainer(cfg: RunConfig, model_dir: Path) -> StepTrainer:
    """The run's StepTrainer. Async training corrects for stale data: token-level IS unless set."""
    actor, critic = build_actor(cfg, model_dir)
    pad = load_tokenizer(model_dir).pad_token_id or 0
    algorithm = cfg.algorithm.model_copy(update={"rollout_is": cfg.effective_rollout_is()})
    return StepTrainer(algorithm, cfg.trainer, actor, critic, pad_id=pad)
