"""The trainer's memory savers and its on-policy fast path give the same update as the plain path:
activation checkpointing (and that it really recomputes), token-budget micro-batches, the fused
old-logprob pass (one forward fewer), bf16 compute on CPU, all turned on from the config."""

from __future__ import annotations

import pytest
import torch
from _rollout_helpers import trial

from legorl.config import load_config
from legorl.train.batch import collate
from legorl.train.build import build_trainer
from legorl.train.memory import balance_rows, padding_ratio, token_budget_micro_batches


def rows_batch(n_rows: int = 6, seed: int = 0):
    """Rows of mixed lengths (like the demo's), half rewarded, two groups: GRPO has a signal."""
    g = torch.Generator().manual_seed(seed)
    trials = []
    for i in range(n_rows):
        n = 12 + 9 * ((i * 5) % n_rows)
        toks = torch.randint(0, 1000, (n,), generator=g).tolist()
        mask = [0] * 6 + [1] * (n - 6)
        trials.append(trial(f"r{i}", "t", toks, mask, [0.0] * n, reward=float(i % 2), group_id=f"g{i // 3}"))
    return collate(trials)


def trainer_for(model_dir, *overrides: str):
    cfg = load_config(None, [f"model.path={model_dir}", "trainer.lr=1e-3", "trainer.micro_batch_size=2",
                             "algorithm.entropy_coef=0.01", *overrides])
    torch.manual_seed(0)
    return build_trainer(cfg, model_dir)


def max_rel_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp(min=1e-12)) for k in a)


def record_grads(t) -> dict:
    """The accumulated gradients at the optimizer step (Adam's first step is ~lr * sign(g), which would
    turn float rounding of near-zero gradients into lr-sized weight differences)."""
    seen: dict = {}
    step = t.actor._optimizer_step

    def wrapped():
        seen.update({n: p.grad.clone() for n, p in t.actor.model.named_parameters() if p.grad is not None})
        return step()

    t.actor._optimizer_step = wrapped
    return seen


def grad_diff(a: dict, b: dict) -> float:
    """Largest gradient difference relative to the largest gradient."""
    scale = max(float(v.abs().max()) for v in b.values())
    return max(float((a[k] - b[k]).abs().max()) for k in b) / scale


def count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def fused_and_separate(model_dir, batch, *overrides: str) -> tuple[dict, dict]:
    """One update on `batch` by a fused and a separate-pass trainer: the same gradients and weights, one
    forward per micro-batch fewer (3 micro-batches of 2 rows). Returns both steps' metrics."""
    fused = trainer_for(model_dir, *overrides)
    separate = trainer_for(model_dir, *overrides, "trainer.fuse_old_logprob_pass=false")
    assert fused.fused_old_logprobs and not separate.fused_old_logprobs
    n_fused, n_sep = count_forwards(fused.actor.model), count_forwards(separate.actor.model)
    g_fused, g_sep = record_grads(fused), record_grads(separate)
    m_fused, m_sep = fused.update(batch), separate.update(batch)
    assert g_sep and grad_diff(g_fused, g_sep) < 1e-6
    assert max_rel_diff(fused.weights(), separate.weights()) < 1e-6
    assert n_sep[0] == 2 * n_fused[0]  # the separate pass runs every micro-batch's forwards again
    return m_fused, m_sep


def test_fused_old_logprob_pass_same_update_one_forward_fewer(tiny_llama_dir):
    m_fused, m_sep = fused_and_separate(tiny_llama_dir, rows_batch())
    for key in ("rollout_corr/abs_diff_mean", "actor/pg_loss", "actor/entropy"):
        assert m_fused[key] == pytest.approx(m_sep[key], rel=1e-5, abs=1e-7)


def test_fused_pass_is_off_where_old_and_new_logprobs_differ(tiny_llama_dir):
    """Off where the gradient pass's logprobs are not the anchor (a second epoch, the behaviour anchor) or
    where rejection changes the whole batch's loss normalisation before the first micro-batch."""
    for overrides in (["trainer.ppo_epochs=2"], ["algorithm.ppo_anchor=behaviour"], ["algorithm.rollout_rs=token"],
                      ["algorithm.rollout_rs=geometric"]):
        assert not trainer_for(tiny_llama_dir, *overrides).fused_old_logprobs, overrides


@pytest.mark.parametrize("mode", ["token", "sequence", "masked"])
def test_fused_pass_with_importance_weights_gives_the_separate_pass_update(tiny_llama_dir, mode):
    """Async data (behaviour logprobs off the trainer's by up to +-0.3 per token): the fused pass computes the
    IS weights per micro-batch from its own detached logprobs; gradients, weights and the correction's
    metrics equal the separate pass's."""
    batch = rows_batch()
    noise = (torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(1)) - 0.5) * 0.6
    batch.behav_logp[:] = (trainer_for(tiny_llama_dir).actor.compute_logprobs(batch) + noise) * batch.mask
    m_fused, m_sep = fused_and_separate(
        tiny_llama_dir, batch, "async_training.enabled=true", f"algorithm.rollout_is={mode}",
        "trainer.max_logprob_abs_diff=1.0", "algorithm.rollout_is_threshold=1.2")
    keys = [k for k in m_sep if k.startswith(("rollout_is/", "rollout_corr/", "actor/pg_loss"))]
    assert "rollout_is/ess" in keys and m_sep["rollout_is/ess"] < 0.999  # the weights are not all 1
    for key in keys:
        assert m_fused[key] == pytest.approx(m_sep[key], rel=1e-5, abs=1e-7), key


def test_fused_pass_gate_refuses_before_the_optimizer_step(tiny_llama_dir):
    from legorl.train.trainer import LogprobMismatchError

    batch = rows_batch()
    batch.behav_logp[:] = -50.0 * batch.mask  # the sampler "disagrees" wildly
    t = trainer_for(tiny_llama_dir, "trainer.max_logprob_abs_diff=0.1")
    before = {k: v.clone() for k, v in t.weights().items()}
    with pytest.raises(LogprobMismatchError):
        t.update(batch)
    assert all(torch.equal(v, before[k]) for k, v in t.weights().items())
    assert all(p.grad is None for p in t.actor.model.parameters())


def test_activation_checkpointing_recomputes_and_gives_the_same_gradients(tiny_llama_dir):
    batch = rows_batch()
    plain = trainer_for(tiny_llama_dir)
    ckpt = trainer_for(tiny_llama_dir, "model.gradient_checkpointing=true")
    calls = {"plain": [0], "ckpt": [0]}
    for name, t in (("plain", plain), ("ckpt", ckpt)):
        mlp = t.actor.model.model.layers[0].mlp
        mlp.register_forward_pre_hook(lambda *_, c=calls[name]: c.__setitem__(0, c[0] + 1))
    grads = {}
    for name, t in (("plain", plain), ("ckpt", ckpt)):
        mb = batch.select([0, 1, 2])
        with torch.enable_grad():
            lp, _ = t.actor._forward(t.actor.model, mb)
            (lp * mb.mask).sum().backward()
        grads[name] = {n: p.grad.clone() for n, p in t.actor.model.named_parameters()}
    # checkpointing ran the layer again in backward (HF's own switch does nothing in eval mode)
    assert calls["plain"][0] == 1 and calls["ckpt"][0] == 2
    assert grad_diff(grads["ckpt"], grads["plain"]) < 1e-6


def test_long_rows_recomputes_only_the_micro_batch_over_the_budget(tiny_llama_dir):
    """model.gradient_checkpointing = "long_rows": the 57-token row, over the 50-token budget, trains alone and is
    recomputed; the packed micro-batches are not (true recomputes them all); the gradients are the same."""
    batch = rows_batch()  # rows of 12-57 tokens
    budget = "trainer.max_tokens_per_micro_batch=50"
    calls, grads = {}, {}
    for name, ckpt in (("plain", "false"), ("long", "long_rows"), ("all", "true")):
        t = trainer_for(tiny_llama_dir, budget, f"model.gradient_checkpointing={ckpt}")
        calls[name] = [0]
        t.actor.model.model.layers[0].mlp.register_forward_pre_hook(
            lambda *_, c=calls[name]: c.__setitem__(0, c[0] + 1))
        grads[name] = record_grads(t)
        t.update(batch)
    plain, long, every = calls["plain"][0], calls["long"][0], calls["all"][0]
    assert plain < long < every  # the long row's forwards recomputed, not the packed ones
    assert grad_diff(grads["long"], grads["plain"]) < 1e-6 and grad_diff(grads["all"], grads["plain"]) < 1e-6
    from legorl.config import ConfigError

    with pytest.raises(ConfigError, match=r"set trainer\.max_tokens_per_micro_batch"):
        load_config(None, ["model.gradient_checkpointing=long_rows"])
    with pytest.raises(ConfigError, match="FSDP ranks hold different ones"):
        load_config(None, ["model.gradient_checkpointing=long_rows", budget, "trainer.n_ranks=2"])


def test_activation_checkpointing_with_r3_routing_replay(tiny_moe_dir):
    from legorl.models.moe import routing_tensor  # noqa: F401  (R3 must be importable here)

    batch = rows_batch(4)
    plain = trainer_for(tiny_moe_dir)
    ckpt = trainer_for(tiny_moe_dir, "model.gradient_checkpointing=true")
    assert plain.actor.replayer is not None and ckpt.actor.replayer is not None
    g_plain, g_ckpt = record_grads(plain), record_grads(ckpt)
    plain.update(batch)
    ckpt.update(batch)
    assert g_plain and grad_diff(g_ckpt, g_plain) < 1e-6


def test_token_budget_micro_batches_same_update_less_padding(tiny_llama_dir):
    batch = rows_batch(8)
    fixed = trainer_for(tiny_llama_dir)
    packed = trainer_for(tiny_llama_dir, "trainer.max_tokens_per_micro_batch=160")
    g_fixed, g_packed = record_grads(fixed), record_grads(packed)
    m_fixed, m_packed = fixed.update(batch), packed.update(batch)
    assert g_fixed and grad_diff(g_packed, g_fixed) < 1e-6
    assert m_packed["perf/padding_ratio"] < m_fixed["perf/padding_ratio"]


def test_packing_helpers():
    lengths = [10, 50, 12, 48, 30, 11]
    mbs = token_budget_micro_batches(lengths, range(6), 100)
    assert sorted(i for mb in mbs for i in mb) == list(range(6))
    assert all(len(mb) * max(lengths[i] for i in mb) <= 100 or len(mb) == 1 for mb in mbs)
    assert mbs[0] == [1, 3]  # longest first, paired with its neighbour in length
    assert padding_ratio(lengths, mbs) < padding_ratio(lengths, [[0, 1], [2, 3], [4, 5]])
    shares = balance_rows(lengths, 2)
    assert sorted(shares[0] + shares[1]) == list(range(6))
    assert abs(sum(lengths[i] for i in shares[0]) - sum(lengths[i] for i in shares[1])) <= 12


def test_bf16_step_on_cpu_within_preflights_expected_gap(tiny_llama_dir):
    """bf16 compute against fp32 rollout logprobs: a larger gap than fp32's, reported, and below the gate
    that preflight's expectation for the pair suggests."""
    from legorl.train.device import expected_logprob_gap

    batch = rows_batch()
    fp32 = trainer_for(tiny_llama_dir)
    batch.behav_logp = fp32.actor.compute_logprobs(batch) * batch.mask  # an fp32 "engine"
    gap = expected_logprob_gap("float32", "bfloat16")
    bf16 = trainer_for(tiny_llama_dir, "trainer.dtype=bfloat16", f"trainer.max_logprob_abs_diff={gap.gate}")
    m = bf16.update(batch)
    assert 1e-5 < m["rollout_corr/abs_diff_mean"] < gap.gate
    assert all(p.dtype == torch.float32 for p in bf16.actor.model.parameters())  # fp32 master weights
    assert expected_logprob_gap("float32", "float32").expected < gap.expected


def test_chunked_vocab_logprobs_equal_the_full_head(tiny_llama_dir, monkeypatch):
    """The vocabulary projection in recomputed chunks gives the logprobs, entropies and gradients of the
    model's own head (the path FSDP2 takes)."""
    import legorl.train.logprobs as lp_mod

    batch = rows_batch()
    t = trainer_for(tiny_llama_dir)
    out = {}
    for name in ("chunked", "full"):
        if name == "full":
            monkeypatch.setattr(lp_mod, "_plain_head", lambda _model: None)
        t.actor.model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            lp, ent = lp_mod.token_logprobs(t.actor.model, batch.input_ids, batch.attention_mask, batch.mask,
                                            temperature=0.7, with_entropy=True, chunk=16)
            (lp.sum() + ent.sum()).backward()
        out[name] = (lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in t.actor.model.named_parameters()})
    assert torch.allclose(out["chunked"][0], out["full"][0], atol=1e-5)
    assert torch.allclose(out["chunked"][1], out["full"][1], atol=1e-5)
    assert grad_diff(out["chunked"][2], out["full"][2]) < 1e-5
