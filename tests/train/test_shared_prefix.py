"""Shared-prefix forwards (train/prefix.py): the loss and gradients of the unshared rows, on a tiny dense model
(both head paths, activation checkpointing, float64 to rounding) and a tiny MoE under R3 replay, and through
the trainer from the config (token-budget micro-batches, the fused old-logprob pass)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _rollout_helpers import trial
from test_trainer_memory import grad_diff, record_grads, trainer_for
from transformers import AutoModelForCausalLM

from legorl.config import load_config
from legorl.train.actor import Actor
from legorl.train.batch import collate
from legorl.train.logprobs import token_logprobs
from legorl.train.memory import (
    balance_groups,
    enable_activation_checkpointing,
    group_micro_batches,
    shared_cost,
)
from legorl.train.prefix import plan_prefixes


def grouped_rows(vocab: int, groups: int = 2, per: int = 3, system: int = 8, prompt: int = 12, seed: int = 0,
                 routing: tuple[int, int, int] | None = None):
    """`groups` GRPO groups of `per` rows: a system prompt every row shares, a prompt per group, responses of
    different lengths (every group's rows also share their first response token: a policy token inside the
    shared prefix). With
    `routing` = (layers, k, experts): per-row recorded routing, alike wherever the tokens are."""
    g = torch.Generator().manual_seed(seed)
    sys_ids = torch.randint(0, vocab, (system,), generator=g).tolist()
    rng = np.random.default_rng(seed)
    trials, lookup = [], {}
    for gi in range(groups):
        pr = sys_ids + torch.randint(0, vocab, (prompt,), generator=g).tolist()
        first = torch.randint(0, vocab, (1,), generator=g).tolist()
        for r in range(per):
            resp = first + torch.randint(0, vocab, (3 + 2 * r,), generator=g).tolist()
            toks = pr + resp
            mask = [0] * len(pr) + [1] * len(resp)
            extra = {}
            if routing is not None:
                layers, k, experts = routing
                rows = []
                for t in range(len(toks) - 1):  # the same context routes the same way
                    key = tuple(toks[: t + 1])
                    if key not in lookup:
                        lookup[key] = np.stack([rng.choice(experts, k, replace=False) for _ in range(layers)])
                    rows.append(lookup[key])
                extra["routed_experts"] = np.stack(rows).astype(np.int16)
            trials.append(trial(f"r{gi}{r}", f"t{gi}", toks, mask, [0.0] * len(toks), reward=float(r % 2),
                                group_id=f"g{gi}", **extra))
    return collate(trials)


def grads_of(model, batch, plan, with_entropy=True):
    model.zero_grad(set_to_none=True)
    lp, ent = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, 0.7, with_entropy,
                             prefix=plan)
    ((lp * batch.mask).sum() + (ent * batch.mask).sum()).backward()
    return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("head", ["chunked", "model"])
def test_shared_prefix_logprobs_and_gradients_equal_unshared(tiny_llama_dir, monkeypatch, head):
    """Three levels (system prompt, group prompt, rows), a policy token inside a group's prefix, fixed and
    adaptive levels, checkpointed layers: fp32 logprobs and gradients within 1e-6 of the unshared rows."""
    import legorl.train.logprobs as lp_mod

    if head == "model":  # the FSDP2 path: the model's own head inside its forward
        monkeypatch.setattr(lp_mod, "_plain_head", lambda _model: None)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    batch = grouped_rows(model.config.vocab_size)
    lp0, g0 = grads_of(model, batch, None)
    plan = plan_prefixes(batch.input_ids, batch.attention_mask, batch.group_ids)
    assert plan.cuts[0].tolist() == [0, 8, 21]  # the shared response token joins g0's prefix
    assert plan.computed_tokens < batch.attention_mask.sum() / 2
    for p in (plan, plan_prefixes(batch.input_ids, batch.attention_mask, batch.group_ids, fixed_levels=True)):
        lp, g = grads_of(model, batch, p)
        m = batch.mask > 0
        assert (lp - lp0)[m].abs().mean() <= 1e-6 and (lp - lp0)[m].abs().max() <= 1e-5
        assert grad_diff(g, g0) <= 1e-6
    enable_activation_checkpointing(model)
    lp, g = grads_of(model, batch, plan)
    assert grad_diff(g, g0) <= 1e-6


def test_shared_prefix_is_exact_in_float64(tiny_llama_dir, monkeypatch):
    """In float64 (RMSNorm kept in float64 too: HF's casts to float32) sharing equals the unshared rows to
    1e-12: the differences in fp32 are rounding of a different summation order, not a different sum."""
    from transformers.models.llama import modeling_llama

    def rms(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float64).eval()
    batch = grouped_rows(model.config.vocab_size)
    lp0, g0 = grads_of(model, batch, None)
    lp, g = grads_of(model, batch, plan_prefixes(batch.input_ids, batch.attention_mask, batch.group_ids))
    assert float((lp - lp0).abs().max()) <= 1e-12 and grad_diff(g, g0) <= 1e-12


def test_shared_prefix_under_r3_replay(tiny_moe_dir):
    """Tiny Qwen3-MoE, R3 replay: the shared prefix also matches on recorded routing (a row whose routing
    differs inside the token prefix cuts it there), and the step's gradients equal the unshared step's."""
    cfg = load_config(None, ["trainer.lr=1e-3", "algorithm.entropy_coef=0.01", "trainer.micro_batch_size=6"])
    model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32).eval()
    c = model.config
    batch = grouped_rows(c.vocab_size, routing=(c.num_hidden_layers, c.num_experts_per_tok, c.num_experts))
    r = batch.routed_experts[4]
    r[5] = (r[5] + 1) % c.num_experts  # row 4 (group g1) routed position 5 differently
    plan = plan_prefixes(batch.input_ids, batch.attention_mask, batch.group_ids, batch.routed_experts)
    assert plan.cuts[:, 1].tolist() == [5] * 6 and plan.cuts[3:, 2].tolist() == [5, 5, 5]
    grads = {}
    for share in (False, True):
        cfg.trainer.share_prefix = share
        m = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, dtype=torch.float32)
        actor = Actor(m, cfg.trainer, cfg.algorithm, 1.0, enable_r3=True)
        actor._replay(batch)
        with torch.enable_grad():
            lp, ent = actor._forward(m, batch, with_entropy=True, replay=True)
            ((lp * batch.mask).sum() + (ent * batch.mask).sum()).backward()
        actor._replay(None)
        assert actor.replayer.replayed_rows > 0
        grads[share] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    assert grad_diff(grads[True], grads[False]) <= 1e-6
    assert any(n.endswith("mlp.gate.weight") for n in grads[True])  # the routers still learn


def test_trainer_step_with_shared_prefixes_equals_unshared(tiny_llama_dir):
    """From the config through the trainer: fused old-logprob pass, token-budget micro-batches that keep
    groups together; the same gradients, fewer positions computed."""
    batch = grouped_rows(1000, groups=3)
    budget = "trainer.max_tokens_per_micro_batch=80"
    plain = trainer_for(tiny_llama_dir, budget, "trainer.share_prefix=false")
    shared = trainer_for(tiny_llama_dir, budget)
    assert shared.actor.trainer.share_prefix and shared.fused_old_logprobs
    g_plain, g_shared = record_grads(plain), record_grads(shared)
    m_plain, m_shared = plain.update(batch), shared.update(batch)
    assert g_plain and grad_diff(g_shared, g_plain) <= 1e-6
    assert m_shared["actor/pg_loss"] == pytest.approx(m_plain["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert m_shared["rollout_corr/abs_diff_mean"] == pytest.approx(m_plain["rollout_corr/abs_diff_mean"], abs=1e-6)
    assert m_shared["perf/computed_token_share"] < 0.75 < m_plain["perf/computed_token_share"]


def test_group_planners_keep_groups_together():
    lengths = [30, 32, 31, 20, 22, 50, 52, 51, 53]
    prefix = [25, 25, 25, 15, 15, 40, 40, 40, 40]
    groups = ["a"] * 3 + ["b"] * 2 + ["c"] * 4
    mbs = group_micro_batches(lengths, prefix, groups, range(9), 100, 2)
    assert sorted(i for mb in mbs for i in mb) == list(range(9))
    assert all(shared_cost(lengths, prefix, groups, mb) <= 100 for mb in mbs)
    assert all(len({groups[i] for i in mb}) == 1 or shared_cost(lengths, prefix, groups, mb) <= 100 for mb in mbs)
    assert all(len({mb_of[i] for i in range(9) if groups[i] == g}) == 1 for g in "abc"
               for mb_of in [{i: k for k, mb in enumerate(mbs) for i in mb}])  # no group split
    assert group_micro_batches(lengths, prefix, groups, range(9), None, 3)[0] == [0, 1, 2]
    shares = balance_groups(lengths, prefix, groups, 2)
    assert sorted(shares[0] + shares[1]) == list(range(9))
    assert not ({groups[i] for i in shares[0]} & {groups[i] for i in shares[1]})  # no group split
