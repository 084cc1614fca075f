"""A full trainer step (tiny model): update, weight sync to the engine, and the fidelity guard."""

from __future__ import annotations

import pytest
import torch
from _rollout_helpers import multi_turn_rollouts
from transformers import AutoModelForCausalLM

from legorl.config import RunConfig, load_config
from legorl.models.chat import load_tokenizer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.actor import Actor
from legorl.train.critic import Critic
from legorl.train.steps import learn
from legorl.train.trainer import LogprobMismatchError, StepTrainer


def build(cfg: RunConfig, path, critic=False):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    actor = Actor(model, cfg.trainer, cfg.algorithm, cfg.rollout.temperature)
    crit = Critic(str(path), lr=1e-3) if critic else None
    return StepTrainer(cfg.algorithm, cfg.trainer, actor, crit)


async def step(trainer: StepTrainer, engine, trials) -> dict[str, float]:
    """What the sync loop does with a batch: learn, then push the weights."""
    m = learn(trainer, trials)
    m["weight_version"] = float(await WeightSync([engine]).push(trainer.weights()))
    return m


@pytest.mark.parametrize("overrides", [
    ["algorithm.adv_estimator=grpo"],
    ["algorithm.adv_estimator=rloo", "algorithm.rollout_is=token"],
    ["algorithm.policy_loss_mode=gspo", "algorithm.clip_ratio_low=3e-4", "algorithm.clip_ratio_high=4e-4"],
])
async def test_step_updates_weights_and_engine_serves_new_version(tiny_llama_dir, overrides):
    cfg = load_config(None, ["trainer.lr=1e-3", "trainer.max_logprob_abs_diff=1e-3", *overrides])
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        tok = load_tokenizer(tiny_llama_dir)
        rollouts = await multi_turn_rollouts(engine, tok, 4)
        trainer = build(cfg, tiny_llama_dir)
        before = {k: v.clone() for k, v in trainer.actor.model.state_dict().items()}
        m = await step(trainer, engine, rollouts)
        assert m["weight_version"] == 1.0 and engine.weight_version == 1
        assert m["rollout_corr/abs_diff_mean"] <= 1e-5 and m["rollout_corr/pearson"] >= 0.9999
        assert any(not torch.equal(v, before[k]) for k, v in trainer.actor.model.state_dict().items())
        for key in ("critic/score/mean", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "actor/grad_norm",
                    "response_length/mean", "rollout_corr/kl"):
            assert key in m
        out = await engine.generate(GenerateRequest(rollouts[0].tokens.token_ids[:30], SamplingParams(max_tokens=3)))
        assert out.weight_version == 1
    finally:
        await engine.close()


async def test_step_refuses_a_batch_with_corrupted_logprobs(tiny_llama_dir):
    cfg = load_config(None, ["trainer.max_logprob_abs_diff=1e-3"])
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        rollouts = await multi_turn_rollouts(engine, load_tokenizer(tiny_llama_dir), 2)
        for r in rollouts:
            t = r.tokens
            t.logprobs = [lp - 0.5 if m else lp for lp, m in zip(t.logprobs, t.response_mask, strict=True)]
        trainer = build(cfg, tiny_llama_dir)
        with pytest.raises(LogprobMismatchError, match="refusing this batch"):
            await step(trainer, engine, rollouts)
        assert engine.weight_version == 0
    finally:
        await engine.close()


async def test_filter_groups_trains_on_mixed_groups_only(tiny_llama_dir):
    """algorithm.filter_groups: a group whose rewards are all equal leaves the update, which is then the same
    as an update on the mixed group alone; a batch of uniform groups makes no optimizer step."""
    from legorl.config import ConfigError

    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        rollouts = await multi_turn_rollouts(engine, load_tokenizer(tiny_llama_dir), 4)
    finally:
        await engine.close()
    rollouts[2].reward = 1.0  # group g1: (1, 1), uniform; g0: (0, 1)
    filtered = build(load_config(None, ["trainer.lr=1e-3", "algorithm.filter_groups=true"]), tiny_llama_dir)
    plain = build(load_config(None, ["trainer.lr=1e-3"]), tiny_llama_dir)
    m = learn(filtered, rollouts)
    learn(plain, rollouts[:2])
    assert m["filter_groups/kept_rows"] == 2 and m["filter_groups/dropped_rows"] == 2
    assert m["grpo/num_groups"] == 2 and m["grpo/zero_std_groups"] == 1 and m["actor/grad_norm"] > 0
    want = plain.actor.model.state_dict()
    assert all(torch.allclose(v, want[k], atol=1e-7) for k, v in filtered.actor.model.state_dict().items())

    idle = build(load_config(None, ["trainer.lr=1e-3", "algorithm.filter_groups=true"]), tiny_llama_dir)
    before = {k: v.clone() for k, v in idle.actor.model.state_dict().items()}
    m = learn(idle, rollouts[2:])
    assert m["filter_groups/kept_rows"] == 0 and m["actor/skipped"] == 1 and not idle.actor.optimizer.state
    assert all(torch.equal(v, before[k]) for k, v in idle.actor.model.state_dict().items())
    with pytest.raises(ConfigError, match="filter_groups=true needs a group estimator"):
        load_config(None, ["algorithm.adv_estimator=gae", "algorithm.n_resp_per_prompt=1", "algorithm.filter_groups=true"])


async def test_ppo_with_gae_critic_step(tiny_llama_dir, tmp_path):
    """A PPO step trains the critic with the fused AdamW (train/optim.py); a checkpoint resumes its moments on it."""
    cfg = load_config(None, ["algorithm.adv_estimator=gae", "algorithm.n_resp_per_prompt=1", "trainer.lr=1e-3"])
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        rollouts = await multi_turn_rollouts(engine, load_tokenizer(tiny_llama_dir), 2)
        trainer = build(cfg, tiny_llama_dir, critic=True)
        m = await step(trainer, engine, rollouts)
        assert "critic/vf_loss" in m and m["critic/vf_loss"] > 0
        assert trainer.critic.optimizer.defaults["fused"] is True
        trainer.save(tmp_path)
        resumed = build(cfg, tiny_llama_dir, critic=True)
        resumed.load(tmp_path)
        opt, before = resumed.critic.optimizer, trainer.critic.optimizer
        assert opt.param_groups[0]["fused"] is True and len(opt.state) == len(before.state) > 0
        for p, q in zip(resumed.critic.parameters(), trainer.critic.parameters(), strict=True):
            assert torch.equal(p, q) and torch.equal(opt.state[p]["exp_avg_sq"], before.state[q]["exp_avg_sq"])
    finally:
        await engine.close()


class _Runtime:
    """TEST DOUBLE for the runtime around a sync (`syncing` / `revive`): only the weight push is under test."""

    def syncing(self):
        import contextlib

        return contextlib.nullcontext()

    async def revive(self) -> int:
        return 0


async def test_a_sync_that_fails_mid_way_is_pushed_again_whole(tiny_llama_dir):
    """`push_weights` (what both training loops call) pushes once more after a replica fails mid-sync (vLLM's
    collective transport raises EngineError on a timeout or a killed server and then takes only a whole push,
    tests/serving/test_vllm_collective.py): the engine ends at the new version holding the trainer's weights,
    and the step's `weight_sync/retries` counts it. The failure is injected into a real embedded engine (its
    first bucket raises after half of it was applied), because a real one needs a vLLM server."""
    from legorl.serving.types import EngineError
    from legorl.train.steps import push_weights, sync_metrics

    cfg = load_config(None, ["trainer.lr=1e-3"])
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        trainer = build(cfg, tiny_llama_dir)
        with torch.no_grad():
            for p in trainer.actor.model.parameters():
                p.add_(0.01)
        real, calls = engine.update_weights, []

        async def flaky(state_dict, version, mode="wait"):
            calls.append(version)
            if len(calls) == 1:
                half = dict(list(state_dict.items())[: len(state_dict) // 2])
                await real(half, version, mode)
                raise EngineError("collective send of bucket 1 did not finish within 8 s")
            await real(state_dict, version, mode)

        engine.update_weights = flaky
        sync = WeightSync([engine])
        m = sync_metrics(sync, await push_weights(_Runtime(), sync, trainer))
        assert calls == [1, 1] and engine.weight_version == 1 and m["weight_sync/retries"] == 1.0
        served = engine.model.state_dict()
        assert all(torch.equal(served[k], v) for k, v in trainer.weights().items() if k in served)
    finally:
        await engine.close()
