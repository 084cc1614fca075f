"""Several named LoRA adapters over one base on the embedded engine: rows of different adapters share packed
steps, each row's logprobs are its adapter's (trainer forward, fp32, 1e-5), KV blocks are never shared across
adapters, and the merged fast path serves a step whose rows all use the only adapter."""

from __future__ import annotations

import asyncio

import pytest
import torch

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, InvalidRequestError, SamplingParams

from .lora_helpers import lora_model, mean_delta
from .reference import hf_model, prompt, teacher_forced


@pytest.fixture
async def engine(tiny_llama_dir):
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0)
    yield eng
    await eng.close()


@pytest.mark.parametrize("kind", ["dense", "moe"])
async def test_rows_of_different_adapters_share_steps_and_keep_their_own_logprobs(tiny_llama_dir, tiny_moe_dir, kind):
    path = tiny_llama_dir if kind == "dense" else tiny_moe_dir
    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=4096, seed=0)
    try:
        await _mixed_rows(engine, path)
    finally:
        await engine.close()


async def _mixed_rows(engine, path):
    (ma, sa), (mb, sb) = lora_model(path, 1), lora_model(path, 2)
    base = hf_model(path)
    await engine.load_adapter("a", sa, version=3)
    await engine.load_adapter("b", sb, version=7)
    assert engine.adapters() == {"a": 3, "b": 7}
    names = [None, "a", "b"] * 3
    prompts = [prompt(path, n_words=i) for i in range(len(names))]
    outs = await asyncio.gather(*[
        engine.generate(GenerateRequest(p, SamplingParams(temperature=1.0, max_tokens=16, seed=i, ignore_eos=True),
                                        adapter=n))
        for i, (p, n) in enumerate(zip(prompts, names, strict=True))])
    stats = engine._adapters.counters
    assert stats["forward_steps"] > 0 and stats["merged_steps"] == 0  # mixed steps, applied per row group
    assert engine._counters["max_prompts_per_step"] > 1
    models = {None: base, "a": ma, "b": mb}
    for p, n, o in zip(prompts, names, outs, strict=True):
        assert o.weight_version == {None: 0, "a": 3, "b": 7}[n]
        assert mean_delta(models[n], p, o) <= 1e-5, n
        other = mb if n == "a" else ma  # a row served with the wrong adapter would be caught
        assert mean_delta(other, p, o) > 1e-3
    # teacher-forced prompt logprobs under a named adapter
    ids = prompts[0] + outs[0].token_ids
    for n in ("a", "b"):
        got = (await engine.prompt_logprobs(ids, adapter=n))[1:]
        ref = teacher_forced(models[n], ids)
        assert sum(abs(x - y) for x, y in zip(got, ref, strict=True)) / len(ref) <= 1e-5


async def test_prefix_cache_is_keyed_by_adapter(engine, tiny_llama_dir):
    (_, sa), (_, sb) = lora_model(tiny_llama_dir, 1), lora_model(tiny_llama_dir, 2)
    await engine.load_adapter("a", sa, version=1)
    await engine.load_adapter("b", sb, version=1)
    ids = prompt(tiny_llama_dir, n_words=60)
    sp = SamplingParams(temperature=0, max_tokens=2)
    first = await engine.generate(GenerateRequest(ids, sp, adapter="a"))
    assert first.cached_prompt_tokens == 0
    assert engine.prefix_cache_probe(ids, adapter="a").hit_tokens > 0
    assert engine.prefix_cache_probe(ids, adapter="b").hit_tokens == 0
    assert engine.prefix_cache_probe(ids).hit_tokens == 0
    for n in ("b", None):  # another adapter, then the base: no block of a's is reused
        assert (await engine.generate(GenerateRequest(ids, sp, adapter=n))).cached_prompt_tokens == 0
    again = await engine.generate(GenerateRequest(ids, sp, adapter="a"))
    assert again.cached_prompt_tokens > 0 and again.token_ids == first.token_ids
    # replacing a's weights makes its old blocks unreachable (b's stay)
    await engine.load_adapter("a", sb, version=2)
    assert engine.prefix_cache_probe(ids, adapter="a").hit_tokens == 0
    assert engine.prefix_cache_probe(ids, adapter="b").hit_tokens > 0


async def test_one_adapter_in_use_is_merged_and_the_base_stays_exact(engine, tiny_llama_dir):
    ma, sa = lora_model(tiny_llama_dir, 1)
    base = hf_model(tiny_llama_dir)
    await engine.load_adapter("a", sa, version=1)
    ids = prompt(tiny_llama_dir)
    sp = SamplingParams(temperature=1.0, max_tokens=12, seed=5, ignore_eos=True)
    out = await engine.generate(GenerateRequest(ids, sp, adapter="a"))
    c = engine._adapters.counters
    assert c["merged_steps"] > 0 and c["forward_steps"] == 0 and engine._adapters.merged is not None
    assert mean_delta(ma, ids, out) <= 1e-5
    plain = await engine.generate(GenerateRequest(ids, sp))  # the base: unmerged, exactly the base weights
    assert engine._adapters.merged is None
    assert mean_delta(base, ids, plain) <= 1e-5
    weights = dict(engine.model.named_parameters())
    assert all(torch.equal(weights[k], v) for k, v in base.named_parameters())


async def test_an_unknown_adapter_is_refused_with_the_known_names(engine, tiny_llama_dir):
    _, sa = lora_model(tiny_llama_dir, 1)
    await engine.load_adapter("a", sa, version=1)
    ids = prompt(tiny_llama_dir)
    with pytest.raises(InvalidRequestError, match=r"unknown adapter 'nope'; this engine holds: a"):
        await engine.generate(GenerateRequest(ids, SamplingParams(max_tokens=2), adapter="nope"))
    with pytest.raises(InvalidRequestError, match="unknown adapter"):
        await engine.prompt_logprobs(ids, adapter="nope")
    bad = {k: v for k, v in sa.items() if not k.endswith("lora_B")}
    with pytest.raises(ValueError, match="lacks"):
        await engine.load_adapter("c", bad, version=1)
    assert engine.adapters() == {"a": 1}


async def test_an_adapter_pushed_in_several_buckets_is_whole(engine, tiny_llama_dir):
    ma, sa = lora_model(tiny_llama_dir, 1)
    modules = sorted({k.rsplit(".", 1)[0] for k in sa})
    half = set(modules[: len(modules) // 2])
    first = {k: v for k, v in sa.items() if k.rsplit(".", 1)[0] in half}
    await engine.load_adapter("a", first, version=5)
    await engine.load_adapter("a", {k: v for k, v in sa.items() if k not in first}, version=5)
    ids = prompt(tiny_llama_dir)
    out = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=12, seed=2,
                                                                    ignore_eos=True), adapter="a"))
    assert out.weight_version == 5 and mean_delta(ma, ids, out) <= 1e-5


async def test_the_vllm_engine_refuses_a_named_adapter_instead_of_serving_the_base():
    from legorl.serving.vllm import VLLMEngine

    eng = VLLMEngine("http://127.0.0.1:9", served_name="m", max_model_len=64, vocab_size=100)
    with pytest.raises(InvalidRequestError, match="does not serve named LoRA adapters"):
        await eng.generate(GenerateRequest([1, 2, 3], SamplingParams(max_tokens=2), adapter="a"))
    await eng.close()


async def test_the_session_scheduler_probes_the_calls_adapter(tiny_llama_dir):
    """Under KV pressure a session whose prefix is resident under its adapter is admitted at once (a probe of
    the base's cache would find nothing and hold it)."""
    from legorl.serving.pool import ReplicaPool
    from legorl.serving.pool_manager import PoolManager
    from legorl.serving.scheduler import SchedulerConfig

    from .test_scheduler_engine import UsageOverride, ids

    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=2048, num_threads=1)
    try:
        _, sa = lora_model(tiny_llama_dir, 1)
        await eng.load_adapter("a", sa, version=1)
        wrapped = UsageOverride(eng)
        mgr = PoolManager(ReplicaPool([wrapped]), scheduler=SchedulerConfig(wait_poll_sec=0.05))  # type: ignore[list-item]
        sp = SamplingParams(temperature=0, max_tokens=2)
        turn1 = ids(1, 160)
        await mgr.generate(GenerateRequest(turn1, sp, session_id="s", adapter="a"))
        wrapped.usage = 0.95  # pressure
        out = await asyncio.wait_for(mgr.generate(GenerateRequest(turn1 + ids(2, 20), sp, session_id="s",
                                                                  adapter="a")), 5)
        assert out.cached_prompt_tokens >= 144 and mgr.metrics()["sched/admit/resident_prefix"] == 1
    finally:
        await eng.close()
