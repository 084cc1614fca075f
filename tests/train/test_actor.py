"""Actor on a tiny real model: logprob agreement with the engine, an update that moves the policy,
weight sync into the engine (the FSDP2 ranks: test_trainer_ranks.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from _rollout_helpers import multi_turn_rollouts
from transformers import AutoModelForCausalLM

from legorl.config import AlgorithmSection, TrainerSection
from legorl.models.chat import load_tokenizer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.actor import Actor
from legorl.train.batch import collate
from legorl.train.logprobs import fidelity

HERE = Path(__file__).parent


def make_actor(path, lr=1e-3, **algo):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = TrainerSection(lr=lr, micro_batch_size=2, total_steps=2)
    return Actor(model, trainer, AlgorithmSection(**algo), temperature=1.0)


async def test_trainer_logprobs_agree_with_engine_and_update_moves_policy(tiny_llama_dir):
    tok = load_tokenizer(tiny_llama_dir)
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        rollouts = await multi_turn_rollouts(engine, tok, 4)
        batch = collate(rollouts)
        actor = make_actor(tiny_llama_dir)
        old = actor.compute_logprobs(batch)
        fid = fidelity(old, batch.behav_logp, batch.mask)
        assert fid["rollout_corr/abs_diff_mean"] <= 1e-5
        assert fid["rollout_corr/pearson"] >= 0.9999
        # push rollout 1 up, rollout 0 down
        adv = torch.zeros_like(batch.mask)
        adv[1], adv[0] = 1.0, -1.0
        before = {k: v.clone() for k, v in actor.model.state_dict().items()}
        metrics = actor.update(batch, adv * batch.mask, old)
        assert {"actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"} <= set(metrics)
        new = actor.compute_logprobs(batch)
        m = batch.mask
        assert ((new[1] - old[1]) * m[1]).sum() > 0 > ((new[0] - old[0]) * m[0]).sum()
        changed = [k for k, v in actor.model.state_dict().items() if not torch.equal(v, before[k])]
        assert changed
        # weight sync: the engine now serves the trained weights under version 1
        sync = WeightSync([engine])
        assert await sync.push(actor.full_state_dict()) == 1
        again = await multi_turn_rollouts(engine, tok, 2)
        g = await engine.generate(GenerateRequest(again[0].tokens.token_ids[:20], SamplingParams(max_tokens=4, seed=0)))
        assert g.weight_version == 1
        fid2 = fidelity(actor.compute_logprobs(collate(again)), collate(again).behav_logp, collate(again).mask)
        assert fid2["rollout_corr/abs_diff_mean"] <= 1e-5
    finally:
        await engine.close()


