"""Build the trainer of a run from its config: the actor (with a frozen reference when KL is on, R3
for MoE), the critic for GAE, and the pad id from the model's tokenizer, on the configured device and
precision; under torch.distributed (a trainer rank) the models are sharded with FSDP2."""

from __future__ import annotations

from pathlib import Path

import torch

from legorl.config.run import RunConfig
from legorl.models.chat import load_tokenizer
from legorl.train.actor import Actor, world
from legorl.train.critic import Critic
from legorl.train.demo_replay import demo_replay
from legorl.train.device import compute_dtype, resolve_device
from legorl.train.memory import enable_activation_checkpointing
from legorl.train.trainer import StepTrainer


def _load(model_dir: Path, device: torch.device):
    from transformers import AutoModelForCausalLM

    # master weights stay fp32 whatever the compute dtype
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)


def build_actor(cfg: RunConfig, model_dir: Path) -> tuple[Actor, Critic | None]:
    """The trainable policy and, for GAE, the critic."""
    from legorl.models.moe import is_moe

    t = cfg.trainer
    device = resolve_device(t.device)
    dtype = compute_dtype(t.dtype)
    sharded = world()[1] > 1
    model = _load(model_dir, device)
    if cfg.model.lora.enabled:
        from legorl.train.lora import attach_lora

        attach_lora(model, cfg.model.lora, seed=cfg.run.seed)
    if cfg.model.gradient_checkpointing:
        enable_activation_checkpointing(model)
    ref = None
    if cfg.algorithm.kl_coef > 0:
        ref = _load(model_dir, device).eval()
        ref.requires_grad_(False)
    moe = is_moe(model)
    r3 = moe if cfg.model.enable_r3 is None else cfg.model.enable_r3
    if r3 and not moe:
        raise NotImplementedError("model.enable_r3=true needs an MoE model; this model is dense")
    if sharded:
        from legorl.train.fsdp import shard_model

        model = shard_model(model, dtype, cpu_offload=t.cpu_offload)
        if ref is not None:
            ref = shard_model(ref, dtype)
    long_rows = cfg.model.gradient_checkpointing == "long_rows"
    actor = Actor(model, t, cfg.algorithm, cfg.rollout.temperature, ref, enable_r3=r3,
                  device=device, dtype=dtype, sharded=sharded,
                  recompute_over=t.max_tokens_per_micro_batch if long_rows else None,
                  demos=demo_replay(cfg, model_dir))
    critic = None
    if cfg.algorithm.adv_estimator == "gae":
        if sharded:
            raise NotImplementedError("adv_estimator='gae' (a critic) runs with trainer.n_ranks = 1 only")
        critic = Critic(str(model_dir), t.critic_lr, t.max_grad_norm, t.micro_batch_size).to(device)
    return actor, critic


def build_trainer(cfg: RunConfig, model_dir: Path) -> StepTrainer:
    """The run's StepTrainer. Async training corrects for stale data: token-level IS unless set."""
    actor, critic = build_actor(cfg, model_dir)
    pad = load_tokenizer(model_dir).pad_token_id or 0
    algorithm = cfg.algorithm.model_copy(update={"rollout_is": cfg.effective_rollout_is()})
    return StepTrainer(algorithm, cfg.trainer, actor, critic, pad_id=pad)

