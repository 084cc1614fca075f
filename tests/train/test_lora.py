"""LoRA end to end on tiny models: only the adapter trains and syncs, the engine serves it exactly."""

from __future__ import annotations

import pytest
import torch
from _rollout_helpers import multi_turn_rollouts
from test_r3 import moe_rollouts
from transformers import AutoModelForCausalLM

from legorl.config import ConfigError, load_config
from legorl.models.chat import chat_ids, load_tokenizer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.build import build_trainer
from legorl.train.lora import adapter_state, attach_lora
from legorl.train.steps import learn

LORA = ["model.lora.rank=4", "model.lora.alpha=8", "trainer.lr=2e-2", "trainer.max_logprob_abs_diff=1e-3"]


def test_zero_b_reproduces_the_base_exactly(tiny_llama_dir):
    cfg = load_config(None, ["model.lora.rank=4"])
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    names = attach_lora(model, cfg.model.lora)
    assert any(n.endswith("q_proj") for n in names) and not any("lm_head" in n for n in names)
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(base(input_ids=ids).logits, model(input_ids=ids).logits)


def test_only_the_adapter_trains_and_syncs(tiny_llama_dir):
    cfg = load_config(None, [*LORA, "model.lora.target_modules=[\"q_proj\",\"v_proj\"]"])
    trainer = build_trainer(cfg, tiny_llama_dir)
    trained = {n for n, p in trainer.actor.model.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith((".lora_A", ".lora_B")) for n in trained)
    assert all(n.rsplit(".", 2)[-2] in ("q_proj", "v_proj") for n in trained)
    opt = {id(p) for g in trainer.actor.optimizer.param_groups for p in g["params"]}
    assert opt == {id(p) for n, p in trainer.actor.model.named_parameters() if n in trained}
    sent: list[dict] = []
    nbytes = trainer.stream_weights(sent.append)
    assert len(sent) == 1 and set(sent[0]) == set(adapter_state(trainer.actor.model))
    assert nbytes == sum(v.numel() * v.element_size() for v in sent[0].values())


@pytest.mark.parametrize("model", ["dense", "moe"])
async def test_rollout_matches_trainer_after_updates_and_syncs(tiny_llama_dir, tiny_moe_dir, model):
    """Three learn + adapter-sync rounds: each round's rollouts come from the synced adapter, and the
    trainer's recompute agrees with them to 1e-5 (fp32; R3 on for the MoE model)."""
    path = tiny_llama_dir if model == "dense" else tiny_moe_dir
    tok = load_tokenizer(path)
    trainer = build_trainer(load_config(None, LORA), path)
    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=4096)
    try:
        sync = WeightSync([engine])
        base = {k: v.clone() for k, v in trainer.actor.model.state_dict().items() if "lora_" not in k}
        for step in range(3):
            rollouts = (await multi_turn_rollouts(engine, tok, 2) if model == "dense"
                        else await moe_rollouts(engine, tok, 2))
            m = learn(trainer, rollouts)
            assert m["rollout_corr/abs_diff_mean"] <= 1e-5, (step, m["rollout_corr/abs_diff_mean"])
            if model == "moe":
                assert m["r3/routing_coverage"] == 1.0
            await sync.push_stream(trainer.stream_weights)
            assert engine.weight_version == step + 1
            assert 0 < sync.last_bytes < 0.1 * sum(v.numel() * 4 for v in base.values())
        after = trainer.actor.model.state_dict()
        assert all(torch.equal(after[k], v) for k, v in base.items())  # the base never moved
        assert any(after[k].abs().max() > 0 for k in after if k.endswith(".lora_B"))  # the adapter did
        served = engine.model.state_dict()  # ... and the engine merged it
        assert any(not torch.equal(served[k], base[k]) for k in base if k.endswith("q_proj.weight"))
    finally:
        await engine.close()


async def test_engine_never_samples_with_a_stale_adapter(tiny_llama_dir):
    """Sync a changed adapter: the next generation's logprobs are the new adapter's, not the old one's
    (the check that catches an async sync that silently delivers nothing)."""
    cfg = load_config(None, [*LORA, "model.lora.init=gaussian"])
    tok = load_tokenizer(tiny_llama_dir)
    trainer = build_trainer(cfg, tiny_llama_dir)
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    ids = chat_ids(tok, [{"role": "user", "content": "hello"}])
    req = GenerateRequest(ids, SamplingParams(temperature=0.0, max_tokens=6))
    try:
        sync = WeightSync([engine])
        await sync.push_stream(trainer.stream_weights)
        first = await engine.generate(req)
        with torch.no_grad():
            for name, p in trainer.actor.model.named_parameters():
                if name.endswith(".lora_B"):
                    p.add_(0.5 * torch.randn_like(p))
        await sync.push_stream(trainer.stream_weights)
        second = await engine.generate(req)
        assert second.weight_version == 2
        full = torch.tensor([ids + second.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(trainer.actor.model(input_ids=full).logits[0].float(), -1)
        expect = [float(logp[len(ids) - 1 + i, t]) for i, t in enumerate(second.token_ids)]
        assert max(abs(a - b) for a, b in zip(expect, second.logprobs, strict=True)) < 1e-4
        assert first.token_ids != second.token_ids or max(
            abs(a - b) for a, b in zip(first.logprobs, second.logprobs, strict=True)) > 1e-2
    finally:
        await engine.close()


async def test_a_replica_that_cannot_load_the_adapter_fails_the_sync(tiny_llama_dir):
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        bad = {"model.layers.0.self_attn.nope.lora_A": torch.zeros(4, 64),
               "model.layers.0.self_attn.nope.lora_B": torch.zeros(64, 4),
               "model.layers.0.self_attn.nope.lora_scaling": torch.tensor(2.0)}
        with pytest.raises(ValueError, match="not a Linear"):
            await WeightSync([engine]).push(bad)
        assert engine.weight_version == 0
        with pytest.raises(ValueError, match="lacks"):
            await WeightSync([engine]).push({"model.layers.0.self_attn.q_proj.lora_A": torch.zeros(4, 64)})
    finally:
        await engine.close()


def test_bad_lora_config_names_the_key():
    with pytest.raises(ConfigError, match=r"model\.lora\.dropout"):
        load_config(None, ["model.lora.rank=4", "model.lora.dropout=0.1"])
    with pytest.raises(ConfigError, match="rank"):
        load_config(None, ["model.lora.rank=-1"])


@pytest.mark.parametrize("variant", [
    ["model.gradient_checkpointing=true"],
    ["trainer.max_tokens_per_micro_batch=64", "trainer.share_prefix=false"],
    ["algorithm.rollout_rs=token"],  # a rejection step: the separate old-logprob pass instead of the fused one
])
async def test_trainer_features_train_the_same_adapter(tiny_llama_dir, variant):
    """Activation checkpointing, token-budget micro-batches and the separate old-logprob pass each give the
    adapter update of the default (fused, shared-prefix) step on the same rollouts, to fp32 rounding."""
    tok = load_tokenizer(tiny_llama_dir)
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    try:
        rollouts = await multi_turn_rollouts(engine, tok, 4)
    finally:
        await engine.close()
    ref, other = build_trainer(load_config(None, LORA), tiny_llama_dir), build_trainer(
        load_config(None, [*LORA, *variant]), tiny_llama_dir)
    assert other.fused_old_logprobs != ("algorithm.rollout_rs=token" in variant)
    m_ref, m = learn(ref, rollouts), learn(other, rollouts)
    assert m["rollout_corr/abs_diff_mean"] <= 1e-5
    a, b = adapter_state(ref.actor.model), adapter_state(other.actor.model)
    assert any(v.abs().max() > 0 for k, v in a.items() if k.endswith("lora_B"))
    worst = max(float((b[k] - a[k]).norm() / a[k].norm().clamp(min=1e-12)) for k in a)
    assert worst < 1e-4, (worst, m_ref["actor/pg_loss"], m["actor/pg_loss"])
