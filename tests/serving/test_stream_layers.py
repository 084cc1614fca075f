"""`GenerateRequest.on_tokens` through every in-process layer a proxy call passes: partial-rollout
resume over a pool manager with the session scheduler, over two real tiny-llama embedded engines.
A generation cut by a weight sync and resumed streams each token exactly once, in order; a stream is
never retried on another replica once tokens went out."""

from __future__ import annotations

import asyncio

import pytest

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.partial import PartialRolloutManager
from legorl.serving.pool import ReplicaPool
from legorl.serving.pool_manager import PoolManager
from legorl.serving.scheduler import SchedulerConfig
from legorl.serving.types import EngineClosedError, GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync


@pytest.fixture
async def engines(tiny_llama_dir):
    engs = [EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=i) for i in range(2)]
    for e in engs:
        await e.start()
    yield engs
    for e in engs:
        await e.close()


async def _until(cond, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.002)):
        if cond():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("timed out")


async def test_resumed_generation_streams_each_token_once(engines):
    pool = ReplicaPool(engines[:1])
    manager = PartialRolloutManager(PoolManager(pool, scheduler=SchedulerConfig()))
    got: list[int] = []
    sp = SamplingParams(temperature=1.0, max_tokens=200, ignore_eos=True, seed=3)
    task = asyncio.create_task(manager.generate(GenerateRequest([1, 5, 9, 31], sp, session_id="s", on_tokens=got.extend)))
    await _until(lambda: len(got) >= 20)
    state = {k: v.clone() for k, v in engines[0].model.state_dict().items()}
    async with manager.syncing():
        await WeightSync(engines[:1]).push(state, mode="abort")
    out = await task
    assert manager.resumed == 1 and set(out.versions()) == {0, 1}
    assert got == out.token_ids and len(got) == 200


async def test_a_streamed_call_is_not_retried_elsewhere(engines):
    pool = ReplicaPool(engines)
    manager = PoolManager(pool)
    got: list[int] = []
    sp = SamplingParams(temperature=1.0, max_tokens=1500, ignore_eos=True, seed=3)
    task = asyncio.create_task(manager.generate(GenerateRequest([1, 5, 9, 31], sp, session_id="s", on_tokens=got.extend)))
    await _until(lambda: len(got) >= 5)
    rid = next(iter(manager._inflight.values())).id
    pool.mark_dead(rid, "killed by the test")
    with pytest.raises(EngineClosedError, match="streamed tokens"):
        await task
    assert 0 < len(got) < 1500 and pool.get(rid) is not None and not pool.get(rid).healthy


def test_a_replayed_stream_swallows_what_was_sent_and_refuses_other_tokens():
    """A call re-run after a crash (same seed) streams each token once; a re-run that samples other
    tokens than those already streamed fails loudly instead of contradicting the stream."""
    from legorl.serving.types import CountingSink, EngineError

    got: list[int] = []
    sent = CountingSink(got.extend)
    sent([1, 2])
    sent([3])
    again = sent.replay()
    again([1])
    again([2, 3, 4])
    again([5])
    assert got == [1, 2, 3, 4, 5] and sent.n == 5
    with pytest.raises(EngineError, match="other tokens"):
        sent.replay()([1, 9])
