"""Partial rollout: a weight sync mid-generation -> one output with two weight versions, each logprob
right for its own weights, trainable as is."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from legorl.config import load_config
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.manager import SingleReplicaManager
from legorl.serving.partial import PartialRolloutManager
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.actor import Actor
from legorl.train.batch import collate
from legorl.train.trainer import StepTrainer
from legorl.trial import TrialTokens


def teacher_forced(model, ids: list[int], start: int) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return [float(logp[p - 1, ids[p]]) for p in range(start, len(ids))]


async def wait_generated(engine: EmbeddedEngine, n: int) -> None:
    while engine.stats().generated_tokens < n:
        await asyncio.sleep(0.001)


@pytest.fixture
async def setup(tiny_llama_dir):
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096)
    await engine.start()
    manager = PartialRolloutManager(SingleReplicaManager(engine, engine.max_model_len))
    yield engine, manager
    await engine.close()


async def test_sync_mid_generation_resumes_with_per_token_versions(tiny_llama_dir, setup):
    engine, manager = setup
    old = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    new = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    prompts = [[1, 5, 9, 200 + i, 31, 7] for i in range(2)]
    sp = SamplingParams(temperature=1.0, max_tokens=300, ignore_eos=True)
    gens = [asyncio.create_task(manager.generate(GenerateRequest(p, sp))) for p in prompts]
    await wait_generated(engine, 20)
    async with manager.syncing():
        await WeightSync([engine]).push(new.state_dict(), mode="abort")
    outs = await asyncio.gather(*gens)
    assert manager.partial == 2 and manager.resumed == 2
    rollouts = []
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.finish_reason == "length" and len(out.token_ids) == 300
        vs = out.versions()
        assert set(vs) == {0, 1} and vs == sorted(vs)  # old weights first, then the new ones
        cut = vs.index(1)
        ids = prompt + out.token_ids
        ref_old = teacher_forced(old, ids, len(prompt))
        ref_new = teacher_forced(new, ids, len(prompt))
        for j, lp in enumerate(out.logprobs):
            ref = ref_old[j] if j < cut else ref_new[j]
            assert abs(lp - ref) < 1e-4, (j, cut, lp, ref)
        # the two versions really differ: the old weights do not explain the resumed tokens
        assert max(abs(a - b) for a, b in zip(out.logprobs[cut:], ref_old[cut:], strict=True)) > 1e-3
        mask = [0] * len(prompt) + [1] * len(out.token_ids)
        rollouts.append(TrialTokens(ids, mask, [0.0] * len(prompt) + out.logprobs,
                                    weight_versions=[-1] * len(prompt) + vs))
    # trains as is: the trainer holds the new weights, the old tokens are off-policy and IS-corrected
    cfg = load_config(None, ["trainer.lr=1e-3", "algorithm.rollout_is=token", "algorithm.entropy_coef=0.01"])
    actor = Actor(new, cfg.trainer, cfg.algorithm, cfg.rollout.temperature)
    new.train()
    batch = collate_tokens(rollouts, rewards=[0.0, 1.0])
    m = StepTrainer(cfg.algorithm, cfg.trainer, actor).update(batch)
    assert m["actor/grad_norm"] > 0 and 0 < m["rollout_is/ess"] <= 1.0


def collate_tokens(tokens: list[TrialTokens], rewards: list[float]):
    """One group of trials with these tokens and rewards, collated as the loop does."""
    from pathlib import Path

    from legorl.tasks.model import Task
    from legorl.trial import TrialResult, TrialSpec

    spec = TrialSpec(Task("task", Path("."), "unused"), group_id="g")
    return collate([TrialResult(spec, "failed", "", r, t) for t, r in zip(tokens, rewards, strict=True)])


async def test_caller_abort_is_not_resumed(setup):
    engine, manager = setup
    req = GenerateRequest([1, 5, 9, 31], SamplingParams(max_tokens=500, ignore_eos=True))
    task = asyncio.create_task(manager.generate(req))
    await wait_generated(engine, 5)
    await manager.abort(req.request_id)
    out = await task
    assert out.finish_reason == "abort" and out.token_weight_versions is None and manager.resumed == 0


async def test_abort_during_sync_after_caller_abort_returns_partial(setup):
    engine, manager = setup
    req = GenerateRequest([1, 5, 9, 31], SamplingParams(max_tokens=500, ignore_eos=True))
    task = asyncio.create_task(manager.generate(req))
    await wait_generated(engine, 5)
    async with manager.syncing():
        await engine.pause("abort")
        await asyncio.sleep(0.05)
        await manager.abort(req.request_id)  # the session closed while the sync ran
        await engine.resume()
    out = await task
    assert out.finish_reason == "abort" and manager.resumed == 0


async def test_proxy_records_per_token_versions_of_a_resumed_reply(tiny_llama_dir, setup):
    import openai

    from legorl.models.chat import load_tokenizer
    from legorl.proxy import ProxyConfig, ProxyServer

    engine, manager = setup
    proxy = ProxyServer(manager, load_tokenizer(tiny_llama_dir), ProxyConfig())
    await proxy.start()
    try:
        s = proxy.open_session()
        c = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
        call = asyncio.create_task(c.chat.completions.create(
            model="p", messages=[{"role": "user", "content": "hi"}], max_tokens=200, extra_body={"ignore_eos": True}))
        await wait_generated(engine, 20)
        sd = {k: v + 0.01 for k, v in engine.model.state_dict().items()}
        async with manager.syncing():
            await WeightSync([engine]).push(sd, mode="abort")
        r = await call
        assert r.choices[0].finish_reason in ("length", "stop")  # one ordinary reply, no error
        rec = await proxy.close_session(s.id)
        policy = [v for v, m in zip(rec.weight_versions, rec.mask, strict=True) if m]
        assert set(policy) == {0, 1} and policy == sorted(policy)
    finally:
        await proxy.close()
