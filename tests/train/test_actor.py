"""Actor on a tiny real model: logprob agreement with the engine, an update that moves the policy,
weight sync into the engine, and the FSDP2 (gloo, 2 processes under torchrun) step equal to one process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _rollout_helpers import multi_turn_rollouts, trial
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


def _rows_batch(tiny_llama_dir):
    """A fixed batch with varied lengths and masks (no engine needed: logprobs come from the model)."""
    g = torch.Generator().manual_seed(0)
    rollouts = []
    for i in range(4):
        n = 20 + 7 * i
        toks = torch.randint(0, 1000, (n,), generator=g).tolist()
        mask = [0] * 8 + [1] * (n - 8)
        rollouts.append(trial(f"r{i}", "t", toks, mask, [0.0] * n, reward=float(i % 2), group_id="g"))
    return collate(rollouts)


@pytest.mark.slow
def test_fsdp2_two_process_step_equals_single_process(tiny_llama_dir, tmp_path):
    """Runs tests/train/fsdp_worker.py under torchrun (2 ranks, gloo) and compares weights."""
    batch = _rows_batch(tiny_llama_dir)
    torch.save(batch, tmp_path / "batch.pt")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "fsdp_worker.py"), str(tiny_llama_dir), str(tmp_path)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    sharded = torch.load(tmp_path / "sharded.pt")
    actor = make_actor(tiny_llama_dir)
    old = actor.compute_logprobs(batch)
    adv = (batch.rewards - batch.rewards.mean()).unsqueeze(-1) * batch.mask
    actor.update(batch, adv, old)
    single = actor.full_state_dict()
    init = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).state_dict()
    moved = max((single[k] - init[k]).abs().max().item() for k in single)
    worst = max((single[k] - sharded[k]).abs().max().item() for k in single)
    # Adam moves every weight by ~lr (1e-3); reduction order differs between 1 and 2 ranks, so allow
    # 1% of one step: a wrong loss scale or a missing shard would be off by ~lr.
    assert moved > 5e-4
    assert worst < 1e-5, worst
