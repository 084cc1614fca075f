"""Embedded engine behaviour against a plain HF forward on the same weights (tiny models)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
import torch

from legorl.models import ModelNotFoundError
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.embedded.omp import _pause_fn
from legorl.serving.types import (
    ContextLengthError,
    EngineClosedError,
    GenerateRequest,
    InvalidRequestError,
    SamplingParams,
)

from .reference import hf_model, max_delta, prompt, teacher_forced


@pytest.fixture
async def engine(tiny_llama_dir):
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0)
    yield eng
    await eng.close()


async def test_greedy_matches_hf_generate(engine, tiny_llama_dir):
    ids = prompt(tiny_llama_dir)
    out = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=0, max_tokens=24)))
    ref = hf_model(tiny_llama_dir).generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
    assert out.token_ids == ref[0, len(ids) :].tolist()
    assert out.finish_reason in ("length", "stop") and out.weight_version == 0


async def test_sampled_logprobs_match_teacher_forced_single_and_batched(engine, tiny_llama_dir):
    model = hf_model(tiny_llama_dir)
    ids = prompt(tiny_llama_dir)
    sp = SamplingParams(temperature=0.7, top_p=0.9, top_k=50, max_tokens=24, seed=3)
    single = await engine.generate(GenerateRequest(ids, sp))
    assert max_delta(model, single, ids, 0.7) < 1e-4
    prompts = [prompt(tiny_llama_dir, n_words=i * 3) for i in range(6)]
    outs = await asyncio.gather(
        *[engine.generate(GenerateRequest(p, SamplingParams(temperature=1.0, max_tokens=20, seed=i)))
          for i, p in enumerate(prompts)]
    )
    for p, o in zip(prompts, outs, strict=True):
        assert len(o.token_ids) == len(o.logprobs) > 0
        assert max_delta(model, o, p, 1.0) < 1e-4
    # a seed fixes the sample whatever else is in the batch
    again = await engine.generate(GenerateRequest(ids, sp))
    assert again.token_ids == single.token_ids


async def test_packed_steps_match_teacher_forced(tiny_llama_dir):
    """Prompts admitted together, chunked (24 tokens a step) and mixed with decode rows, some over a
    cached prefix: every logprob matches a teacher-forced forward (mean <= 1e-5, max <= 1e-4), and the
    model the engine serves still computes exactly what it did for any other caller."""
    model = hf_model(tiny_llama_dir)
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, prefill_chunk=24, seed=0)
    try:
        base = prompt(tiny_llama_dir, n_words=30)
        sp = [SamplingParams(temperature=t, max_tokens=20, seed=i, ignore_eos=True) for i, t in enumerate([1.0, 0.7, 0])]
        first = asyncio.create_task(eng.generate(GenerateRequest(base, SamplingParams(1.0, max_tokens=40, seed=9,
                                                                                  ignore_eos=True))))
        while eng.stats().generated_tokens < 3:
            await asyncio.sleep(0.005)
        prompts = [base + prompt(tiny_llama_dir, "and then", n_words=i) for i in range(3)]  # over base's blocks
        prompts += [prompt(tiny_llama_dir, "another task", n_words=4 * i) for i in range(3)]
        outs = await asyncio.gather(*[eng.generate(GenerateRequest(p, sp[i % 3])) for i, p in enumerate(prompts)])
        prompts, outs = [base, *prompts], [await first, *outs]
        temps = [1.0] + [sp[i % 3].temperature for i in range(6)]
        deltas = []
        for p, o, t in zip(prompts, outs, temps, strict=True):
            ref = teacher_forced(model, p + o.token_ids, t)[len(p) - 1 :]
            deltas += [abs(a - b) for a, b in zip(o.logprobs, ref, strict=True)]
        assert sum(deltas) / len(deltas) <= 1e-5 and max(deltas) <= 1e-4
        c = eng._counters
        assert c["mixed_steps"] > 0 and c["max_prompts_per_step"] >= 2
        assert eng.stats().prefill_tokens_cached >= 3 * (len(base) // 16) * 16
        ids = torch.tensor([prompts[1]])
        with torch.no_grad():
            assert torch.equal(eng.model(input_ids=ids).logits, model(input_ids=ids).logits)
    finally:
        await eng.close()
    assert eng.model.config._attn_implementation == model.config._attn_implementation


async def test_prefix_cache_hits_skip_prefill(engine, tiny_llama_dir):
    ids = prompt(tiny_llama_dir, n_words=40)
    first = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=0, max_tokens=8)))
    computed = engine.stats().prefill_tokens_computed
    assert first.cached_prompt_tokens == 0
    turn2 = ids + first.token_ids + prompt(tiny_llama_dir, "next turn")
    probe = engine.prefix_cache_probe(turn2)
    assert probe.hit_tokens >= len(ids) - engine.block_size and 0 < probe.ratio < 1
    assert engine.prefix_cache_probe(turn2) == probe  # probing does not change the cache
    second = await engine.generate(GenerateRequest(turn2, SamplingParams(temperature=0, max_tokens=8)))
    assert second.cached_prompt_tokens == probe.hit_tokens
    assert engine.stats().prefill_tokens_computed - computed == len(turn2) - probe.hit_tokens


async def test_small_kv_budget_preempts_and_recomputes_without_corruption(tiny_llama_dir):
    prompts = [prompt(tiny_llama_dir, n_words=10 + i) for i in range(6)]
    params = [SamplingParams(temperature=1.0, max_tokens=48, seed=i, stop_token_ids=[]) for i in range(6)]
    big = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=8192)
    small = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=256, block_size=16)
    try:
        ref = await asyncio.gather(*[big.generate(GenerateRequest(p, s)) for p, s in zip(prompts, params, strict=True)])
        got = await asyncio.gather(*[small.generate(GenerateRequest(p, s)) for p, s in zip(prompts, params, strict=True)])
        assert small.stats().preemptions > 0 and small.pool.evictions > 0
        model = hf_model(tiny_llama_dir)
        for p, r, g in zip(prompts, ref, got, strict=True):
            assert g.token_ids == r.token_ids
            assert max_delta(model, g, p, 1.0) < 1e-4
        assert small.kv_cache_usage() == 0.0
    finally:
        await big.close()
        await small.close()


async def test_weight_update_under_kv_pressure_finishes_and_never_mixes(tiny_llama_dir):
    """A pending update holds new work while preempted requests (which hold sampled tokens) finish: requests
    not yet started give their blocks back, so the update neither deadlocks nor mixes versions."""
    model = hf_model(tiny_llama_dir)
    small = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=256, block_size=16, prefill_chunk=32)
    try:
        prompts = [prompt(tiny_llama_dir, n_words=10 + i) for i in range(6)]
        sp = [SamplingParams(temperature=1.0, max_tokens=40, seed=i, ignore_eos=True) for i in range(6)]
        tasks = [asyncio.create_task(small.generate(GenerateRequest(p, s))) for p, s in zip(prompts, sp, strict=True)]
        while small.stats().generated_tokens < 4:
            await asyncio.sleep(0.005)
        new_state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items() if "layers.0" in k}
        await asyncio.wait_for(small.update_weights(new_state, version=1, mode="wait"), 120)
        outs = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert small.stats().preemptions > 0
        new_model = hf_model(tiny_llama_dir)
        new_model.load_state_dict(new_state, strict=False)
        for p, o in zip(prompts, outs, strict=True):
            assert len(o.token_ids) == 40
            assert max_delta(new_model if o.weight_version == 1 else model, o, p, 1.0) < 1e-4
    finally:
        await small.close()


async def test_abort_returns_partial(engine, tiny_llama_dir):
    ids = prompt(tiny_llama_dir)
    req = GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=1500, seed=0))
    task = asyncio.create_task(engine.generate(req))
    while engine.stats().generated_tokens < 5:
        await asyncio.sleep(0.01)
    assert 0 < engine.kv_cache_usage() <= 1
    partial = await engine.abort(req.request_id)
    out = await task
    assert partial is not None and partial.finish_reason == out.finish_reason == "abort"
    assert 5 <= len(out.token_ids) < 1500 and len(out.logprobs) == len(out.token_ids)
    assert await engine.abort("no-such-request") is None


@pytest.mark.parametrize("mode", ["wait", "abort"])
async def test_update_weights_mid_stream_never_mixes_versions(engine, tiny_llama_dir, mode):
    model = hf_model(tiny_llama_dir)
    ids = prompt(tiny_llama_dir)
    sp = SamplingParams(temperature=1.0, max_tokens=200, seed=1, stop_token_ids=[])
    inflight = [asyncio.create_task(engine.generate(GenerateRequest(ids, sp))) for _ in range(3)]
    while engine.stats().generated_tokens < 6:
        await asyncio.sleep(0.01)
    new_state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items() if "layers.0" in k}
    await engine.update_weights(new_state, version=1, mode=mode)
    after = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=20, seed=2)))
    old_outs = await asyncio.gather(*inflight)
    for o in old_outs:
        assert o.weight_version == 0
        assert o.finish_reason == ("abort" if mode == "abort" else "length")
        assert max_delta(model, o, ids, 1.0) < 1e-4  # every token came from the old weights
    assert after.weight_version == 1 == engine.weight_version
    model.load_state_dict(new_state, strict=False)
    assert max_delta(model, after, ids, 1.0) < 1e-4
    assert engine.prefix_cache_probe(ids + after.token_ids).hit_tokens <= len(ids) + len(after.token_ids)


async def test_update_weights_rejects_bad_state_without_changing_anything(engine, tiny_llama_dir):
    with pytest.raises(ValueError, match="unknown parameter"):
        await engine.update_weights({"nope.weight": torch.zeros(1)}, version=5)
    with pytest.raises(ValueError, match="shape"):
        await engine.update_weights({"model.norm.weight": torch.zeros(3)}, version=5)
    assert engine.weight_version == 0


async def test_pause_holds_new_work_until_resume(engine, tiny_llama_dir):
    await engine.pause()
    task = asyncio.create_task(
        engine.generate(GenerateRequest(prompt(tiny_llama_dir), SamplingParams(max_tokens=4, seed=0)))
    )
    await asyncio.sleep(0.3)
    assert not task.done() and engine.stats().paused
    await engine.resume()
    out = await asyncio.wait_for(task, 30)
    assert len(out.token_ids) >= 1


SLEEP_RSS = r"""
import asyncio, os, sys
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

async def main():
    eng = EmbeddedEngine.from_pretrained(sys.argv[1], kv_budget_tokens=262144, num_threads=1)
    await eng.generate(GenerateRequest(list(range(5, 60)), SamplingParams(max_tokens=8, seed=0)))
    pool, before = eng.stats().kv_bytes, rss()
    await eng.sleep()
    print(pool, before - rss())
    await eng.close()

asyncio.run(main())
"""


def test_a_sleeping_engine_gives_its_pool_back_to_the_os(tiny_llama_dir):
    """The process's RSS drops by the pool when the engine sleeps. In a fresh process: a pytest worker's malloc
    state depends on the tests that ran in it before."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", SLEEP_RSS, str(tiny_llama_dir)], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    pool, dropped = int(out[-2]), int(out[-1])
    assert pool > 100e6 and dropped > 0.9 * pool, (pool, dropped)


async def test_sleep_frees_the_kv_pool_after_inflight_work_and_resume_restores_it(tiny_llama_dir):
    """`sleep` (serving.free_kv_during_update) waits for the requests in flight, drops the pool's tensors (their
    memory goes back to the OS: the test above) and the prefix cache, and holds new work; `resume` allocates the
    pool again and the engine samples as before."""
    import weakref

    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=262144, seed=0, num_threads=1)
    try:
        ids = prompt(tiny_llama_dir)
        sp = SamplingParams(temperature=1.0, max_tokens=16, seed=5)
        first = await eng.generate(GenerateRequest(ids, sp))
        pool_bytes = eng.stats().kv_bytes
        assert pool_bytes == 2 * eng.pool.k.nbytes > 50e6 and eng.prefix_cache_probe(ids).hit_tokens > 0
        sampled = eng.stats().generated_tokens
        long = asyncio.create_task(eng.generate(GenerateRequest(ids, SamplingParams(max_tokens=64, ignore_eos=True,
                                                                                     seed=1))))
        while eng.stats().generated_tokens == sampled:  # in flight: it holds a sampled token (and KV blocks)
            await asyncio.sleep(0.005)
        old_k = weakref.ref(eng.pool.k)
        await eng.sleep()
        # The barrier waited for it: asleep, the engine finishes nothing, so it can only have ended before. (Its
        # task may need a few more loop turns to hand the result over, hence the wait rather than `done()`.)
        assert len((await asyncio.wait_for(long, 10)).token_ids) == 64 and eng.stats().paused
        assert old_k() is None  # nothing holds the old tensors
        assert eng.stats().kv_bytes == 0 and eng.stats().paused and eng.prefix_cache_probe(ids).hit_tokens == 0
        held = asyncio.create_task(eng.generate(GenerateRequest(ids, sp)))
        await asyncio.sleep(0.2)
        assert not held.done()
        await eng.resume()
        again = await asyncio.wait_for(held, 30)
        assert eng.stats().kv_bytes == pool_bytes and not eng.stats().paused
        assert again.token_ids == first.token_ids and again.logprobs == pytest.approx(first.logprobs, abs=1e-6)
        assert again.cached_prompt_tokens == 0  # the pool came back empty
    finally:
        await eng.close()


def test_a_pool_with_referenced_blocks_refuses_to_free():
    """A sleep that finds a block still referenced changes nothing (the engine goes on unpaused)."""
    from legorl.serving.embedded.blocks import BlockPool

    pool = BlockPool(4, 16, num_layers=2, kv_heads=1, head_dim=8)
    b = pool.allocate()
    pool.k.fill_(1.0)
    with pytest.raises(RuntimeError, match="1 block"):
        pool.free_storage()
    assert not pool.freed and pool.k.shape == (2, 1, 80, 8) and float(pool.k.sum()) == 2 * 80 * 8
    pool.release([b])
    pool.free_storage()
    assert pool.freed and pool.k.numel() == pool.v.numel() == 0 and pool.available() == 4
    pool.restore_storage()
    assert not pool.freed and pool.k.shape == (2, 1, 80, 8) and float(pool.k.abs().sum()) == 0


async def test_moe_routed_experts_shape_and_values(tiny_moe_dir):
    eng = EmbeddedEngine.from_pretrained(tiny_moe_dir, kv_budget_tokens=2048)
    try:
        ids = prompt(tiny_moe_dir)
        req = GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=12, seed=0), return_routed_experts=True)
        out = await eng.generate(req)
        n, layers, k = len(out.token_ids), 2, 2
        assert out.routed_experts.shape == (n, layers, k)
        assert out.prompt_routed_experts.shape == (len(ids) - 1, layers, k)
        # the routing recorded at generation equals the routing of a teacher-forced forward
        from legorl.models.moe import recording

        model = hf_model(tiny_moe_dir)
        with recording(model) as rec, torch.no_grad():
            model(input_ids=torch.tensor([ids + out.token_ids]))
            full = rec.take().numpy()
        allr = torch.cat([torch.from_numpy(out.prompt_routed_experts), torch.from_numpy(out.routed_experts)])
        assert (torch.from_numpy(full[:-1]).sort(-1).values == allr.sort(-1).values).all()
        # second request over the cached prefix still reports full prompt routing
        again = await eng.generate(GenerateRequest(ids, req.sampling, return_routed_experts=True))
        assert again.cached_prompt_tokens > 0
        assert (again.prompt_routed_experts == out.prompt_routed_experts).all()
        plain = await eng.generate(GenerateRequest(ids, req.sampling))
        assert plain.routed_experts is None
    finally:
        await eng.close()


async def test_bad_input_raises_clear_errors(engine, tiny_llama_dir):
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        await engine.generate(GenerateRequest([], SamplingParams()))
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        await engine.generate(GenerateRequest([1, 2], SamplingParams(max_tokens=-1)))
    with pytest.raises(InvalidRequestError, match="token ids"):
        await engine.generate(GenerateRequest([1, 10**9], SamplingParams()))
    with pytest.raises(ContextLengthError, match="context"):
        await engine.generate(GenerateRequest([1] * (engine.max_model_len + 5), SamplingParams()))
    small = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=64)
    with pytest.raises(ContextLengthError, match="KV budget"):
        await small.generate(GenerateRequest([1] * 100, SamplingParams()))
    with pytest.raises(ModelNotFoundError, match="unknown model"):
        EmbeddedEngine.from_pretrained("/nonexistent/model-dir")
    # the engine still serves after bad input
    out = await engine.generate(GenerateRequest([1, 2, 3], SamplingParams(max_tokens=2)))
    assert len(out.token_ids) >= 1


async def test_calls_racing_with_close_fail_fast(tiny_llama_dir):
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=1024)
    await eng.start()
    req = GenerateRequest([1, 2, 3], SamplingParams(max_tokens=4))
    closing = asyncio.create_task(eng.close())
    racing = asyncio.create_task(eng.generate(req))
    await closing
    with pytest.raises(EngineClosedError):
        await asyncio.wait_for(racing, 10)
    with pytest.raises(EngineClosedError):
        await eng.generate(req)


@pytest.mark.skipif(not sys.platform.startswith("linux") or _pause_fn() is None, reason="needs GNU libgomp")
async def test_idle_openmp_workers_of_other_threads_are_freed(tiny_llama_dir):
    """libgomp throttles every team once idle pools elsewhere outnumber the CPUs: calls into the
    engine free the caller's idle workers, and an engine going idle frees its own."""

    def os_threads() -> int:
        return len(os.listdir("/proc/self/task"))

    async def settles_below(n: int) -> bool:
        deadline = time.monotonic() + 5
        while os_threads() >= n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return os_threads() < n

    before = torch.get_num_threads()
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=1024, num_threads=2)
    try:
        torch.set_num_threads(2)
        base = os_threads()
        torch.exp(torch.randn(1 << 20))  # a parallel region on this thread starts its worker pool
        assert os_threads() > base
        req = GenerateRequest([1, 2, 3], SamplingParams(max_tokens=4))
        assert len((await eng.generate(req)).token_ids) == 4
        # this thread's pool was freed by the call, the engine thread's once it went idle
        assert await settles_below(base + 2)  # + the engine thread itself
        assert len((await eng.generate(req)).token_ids) == 4
    finally:
        torch.set_num_threads(before)
        await eng.close()


async def test_a_group_sent_together_computes_its_prompt_once(tiny_llama_dir):
    """Four attempts of one prompt admitted in the same step (a GRPO group): the first computes the prompt,
    the others wait for its blocks and compute only the last partial block; samples still match a
    teacher-forced forward."""
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0)
    try:
        ids = prompt(tiny_llama_dir, n_words=60)
        bs = eng.block_size
        assert len(ids) > 3 * bs
        await eng.pause()
        tasks = [asyncio.create_task(eng.generate(GenerateRequest(ids, SamplingParams(max_tokens=6, seed=i))))
                 for i in range(4)]
        for _ in range(100):
            await asyncio.sleep(0.02)
            if eng.stats().waiting == 4:
                break
        assert eng.stats().waiting == 4
        await eng.resume()
        outs = await asyncio.gather(*tasks)
        tail = len(ids) - ((len(ids) - 1) // bs) * bs
        assert eng.stats().prefill_tokens_computed == len(ids) + 3 * tail
        assert sorted(o.cached_prompt_tokens for o in outs) == [0] + [len(ids) - tail] * 3
        model = hf_model(tiny_llama_dir)
        assert max(max_delta(model, o, ids, 1.0) for o in outs) < 1e-4
    finally:
        await eng.close()
