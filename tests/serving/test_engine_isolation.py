"""Embedded engine: one request's sampling values or failure never touch the requests batched with it."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from legorl.serving.embedded.sampler import sample_rows
from legorl.serving.types import EngineError, GenerateRequest, InvalidRequestError, SamplingParams

from .reference import prompt

EXTREME = [
    SamplingParams(1.0, 1e-300), SamplingParams(1e20, 1.0), SamplingParams(1e308, 1e-300),
    SamplingParams(1.0, 5e-324, top_k=3), SamplingParams(3e38, 0.5, top_k=1),
]


def test_extreme_values_sample_finite_tokens():
    logits = torch.randn(len(EXTREME), 256, generator=torch.Generator().manual_seed(0)) * 8
    logits[:, :10] = float("-inf")  # masked vocabulary entries: -inf / huge T must not give NaN
    toks, lps = sample_rows(logits, EXTREME, [torch.Generator().manual_seed(i) for i in range(len(EXTREME))])
    assert all(math.isfinite(lp) and lp <= 0 for lp in lps) and all(t >= 10 for t in toks)
    assert toks[0] == int(torch.argmax(logits[0]))  # a vanishing nucleus is the top token
    assert abs(lps[1] + math.log(246)) < 1e-4  # T -> inf: uniform over the unmasked tokens


async def test_a_failing_request_fails_alone(engine, tiny_llama_dir):
    ids = prompt(tiny_llama_dir)
    long = GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=48, seed=1, ignore_eos=True))
    ref = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=48, seed=1,
                                                                    ignore_eos=True)))
    task = asyncio.create_task(engine.generate(long))
    await asyncio.sleep(0.05)
    # a non-integer top_k passes validation but fails inside the sampler: that request alone fails
    bad = [engine.generate(GenerateRequest(ids, SamplingParams(top_k=2.5, max_tokens=4))) for _ in range(3)]
    odd = [engine.generate(GenerateRequest(ids, p)) for p in EXTREME]
    results = await asyncio.gather(*bad, *odd, return_exceptions=True)
    out = await task
    assert out.finish_reason == "length" and len(out.token_ids) == 48
    assert out.token_ids == ref.token_ids  # batching with failing rows changed nothing (seeded)
    for r in results[:3]:
        assert isinstance(r, InvalidRequestError | EngineError), r
    for r in results[3:]:
        assert not isinstance(r, BaseException) and all(math.isfinite(x) for x in r.logprobs), r


@pytest.fixture
async def engine(tiny_llama_dir):
    from legorl.serving.embedded import EmbeddedEngine

    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0)
    yield eng
    await eng.close()
