"""R3 routing replay on a tiny random Qwen3-MoE: exact replay, stability under drift, a training step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _rollout_helpers import trial
from transformers import AutoModelForCausalLM

from legorl.config import load_config
from legorl.models.chat import chat_ids, load_tokenizer
from legorl.models.moe import RoutingRecorder, RoutingReplayer, routing_tensor
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.actor import Actor
from legorl.train.steps import learn
from legorl.train.trainer import StepTrainer, routing_coverage
from legorl.trial import TrialResult


async def moe_rollouts(engine, tok, n: int) -> list[TrialResult]:
    """Two policy turns around a tool result; routing = the final call's prompt + generated rows."""
    out = []
    for i in range(n):
        ids = chat_ids(tok, [{"role": "user", "content": f"task {i}"}])
        sp = SamplingParams(temperature=1.0, max_tokens=10, seed=i)
        g1 = await engine.generate(GenerateRequest(ids, sp, return_routed_experts=True))
        tool = tok("\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        p2 = ids + g1.token_ids + tool
        g2 = await engine.generate(GenerateRequest(p2, sp, return_routed_experts=True))
        toks = p2 + g2.token_ids
        routing = np.concatenate([g2.prompt_routed_experts, g2.routed_experts])
        assert routing.shape[0] == len(toks) - 1
        mask = [0] * len(ids) + [1] * len(g1.token_ids) + [0] * len(tool) + [1] * len(g2.token_ids)
        lps = [0.0] * len(ids) + g1.logprobs + [0.0] * len(tool) + g2.logprobs
        out.append(trial(f"r{i}", "t", toks, mask, lps, reward=float(i % 2), group_id=f"g{i // 2}",
                         routed_experts=routing))
    return out


def forward(model, ids, routing=None):
    rep = RoutingReplayer(model) if routing is not None else None
    rec = RoutingRecorder(model)  # registered after the replayer: sees the replayed ids
    try:
        if rep is not None:
            rep.routing = routing_tensor([routing], len(ids), len(rep.routers), rep.routers[0].top_k)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        return logits, rec.take()
    finally:
        rec.remove()
        if rep is not None:
            rep.remove()


async def test_replay_is_exact_and_survives_weight_drift(tiny_moe_dir):
    tok = load_tokenizer(tiny_moe_dir)
    engine = EmbeddedEngine.from_pretrained(tiny_moe_dir, kv_budget_tokens=4096)
    try:
        (r,) = [t.tokens for t in await moe_rollouts(engine, tok, 1)]
    finally:
        await engine.close()
    model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32).eval()
    free_logits, free_routes = forward(model, r.token_ids)
    rep_logits, rep_routes = forward(model, r.token_ids, r.routed_experts)
    assert torch.equal(rep_routes, free_routes)
    assert torch.equal(free_logits, rep_logits)
    assert torch.equal(free_routes[:-1].sort(-1).values, torch.as_tensor(r.routed_experts).sort(-1).values.short())
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.add_(0.5 * torch.randn_like(layer.mlp.gate.weight))
    _, drift_free = forward(model, r.token_ids)
    _, drift_rep = forward(model, r.token_ids, r.routed_experts)
    recorded = torch.as_tensor(r.routed_experts).sort(-1).values.short()
    assert torch.equal(drift_rep[:-1].sort(-1).values, recorded)  # replay keeps every choice
    changed = (drift_free[:-1].sort(-1).values != recorded).any(-1).float().mean().item()
    assert changed > 0.2  # free routing changes many


async def test_r3_training_step_moves_router_with_full_coverage(tiny_moe_dir):
    cfg = load_config(None, ["trainer.lr=1e-2", "trainer.max_logprob_abs_diff=1e-3"])
    tok = load_tokenizer(tiny_moe_dir)
    engine = EmbeddedEngine.from_pretrained(tiny_moe_dir, kv_budget_tokens=4096)
    try:
        rollouts = await moe_rollouts(engine, tok, 4)
        model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32)
        actor = Actor(model, cfg.trainer, cfg.algorithm, 1.0, enable_r3=True)
        trainer = StepTrainer(cfg.algorithm, cfg.trainer, actor)
        gate0 = model.model.layers[0].mlp.gate.weight.detach().clone()
        m = learn(trainer, rollouts)
        assert m["r3/routing_coverage"] == 1.0
        assert m["rollout_corr/abs_diff_mean"] <= 1e-5
        assert "rollout_corr_no_r3/abs_diff_mean" in m
        assert not torch.equal(gate0, model.model.layers[0].mlp.gate.weight)
    finally:
        await engine.close()


def test_r3_refuses_dense_models_and_unknown_routers(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with pytest.raises(ValueError, match="needs an MoE model"):
        RoutingReplayer(model)


def test_coverage_counts_missing_rows():
    from legorl.train.batch import collate

    r = trial("a", "t", [1, 2, 3, 4], [0, 1, 1, 1], [0.0, -1.0, -1.0, -1.0],
              routed_experts=np.array([[[0, 1]], [[1, 2]], [[-1, -1]]]))
    assert routing_coverage(collate([r])) == pytest.approx(2 / 3)


async def test_r3_coverage_is_full_on_a_partial_rollout_resumed_across_a_sync(tiny_moe_dir):
    """A weight sync in the middle of a generation: the resumed output's routing still covers every
    position (prompt rows + one row per generated token), and an R3 step trains on it."""
    import asyncio

    from legorl.serving.manager import SingleReplicaManager
    from legorl.serving.partial import PartialRolloutManager
    from legorl.train.batch import collate

    engine = EmbeddedEngine.from_pretrained(tiny_moe_dir, kv_budget_tokens=4096)
    await engine.start()
    try:
        manager = PartialRolloutManager(SingleReplicaManager(engine, engine.max_model_len))
        prompt = chat_ids(load_tokenizer(tiny_moe_dir), [{"role": "user", "content": "go"}])
        req = GenerateRequest(prompt, SamplingParams(temperature=1.0, max_tokens=120, ignore_eos=True, seed=0),
                              return_routed_experts=True)
        task = asyncio.create_task(manager.generate(req))
        while engine.stats().generated_tokens < 20:
            await asyncio.sleep(0.001)
        model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
        async with manager.syncing():
            await WeightSync([engine]).push(model.state_dict(), mode="abort")
        out = await task
        assert set(out.versions()) == {0, 1}
        ids = prompt + out.token_ids
        routing = np.concatenate([out.prompt_routed_experts, out.routed_experts])
        assert routing.shape[0] == len(ids) - 1 and (routing >= 0).all()
        r = trial("p", "t", ids, [0] * len(prompt) + [1] * len(out.token_ids),
                  [0.0] * len(prompt) + out.logprobs, routed_experts=routing)
        assert routing_coverage(collate([r])) == 1.0
    finally:
        await engine.close()
