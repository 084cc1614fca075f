"""The scheduler over real embedded replicas: the real prefix probe drives admission, and probing
never queues work or refreshes the cache's LRU order."""

from __future__ import annotations

import asyncio

import pytest

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.pool import ReplicaPool
from legorl.serving.pool_manager import PoolManager
from legorl.serving.scheduler import SchedulerConfig
from legorl.serving.types import GenerateRequest, SamplingParams


class UsageOverride:
    """A real engine whose reported KV usage the test sets (a tiny model never fills its KV);
    everything else, the prefix probe included, is the engine's own."""

    def __init__(self, engine: EmbeddedEngine):
        self.engine = engine
        self.usage = 0.0

    def kv_cache_usage(self) -> float:
        return self.usage

    def __getattr__(self, name: str):
        return getattr(self.engine, name)


@pytest.fixture
async def engine(tiny_llama_dir):
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=2048, num_threads=1)
    yield eng
    await eng.close()


def ids(seed: int, n: int) -> list[int]:
    return [(seed * 977 + i * 13) % 5000 + 20 for i in range(n)]


def greq(prompt: list[int], sid: str) -> GenerateRequest:
    return GenerateRequest(prompt, SamplingParams(temperature=0, max_tokens=2), session_id=sid)


async def test_real_prefix_probe_admits_resident_session_and_holds_a_new_one(engine):
    wrapped = UsageOverride(engine)
    mgr = PoolManager(ReplicaPool([wrapped]), scheduler=SchedulerConfig(wait_poll_sec=0.05))  # type: ignore[list-item]
    turn1 = ids(1, 160)
    await mgr.generate(greq(turn1, "a"))
    wrapped.usage = 0.95  # pressure
    turn2 = turn1 + ids(2, 20)  # the tool result: 160 of 180 tokens already resident
    out = await asyncio.wait_for(mgr.generate(greq(turn2, "a")), 5)
    assert out.cached_prompt_tokens >= 144
    newcomer = asyncio.ensure_future(mgr.generate(greq(ids(3, 160), "b")))
    await asyncio.sleep(0.2)
    assert not newcomer.done() and mgr.scheduler.queue_len == 1
    wrapped.usage = 0.3
    await asyncio.wait_for(newcomer, 5)
    m = mgr.metrics()
    assert m["sched/admit/open"] == 2 and m["sched/admit/resident_prefix"] == 1 and m["sched/waited"] == 1


async def test_prefix_probe_is_read_only(engine):
    a, b = ids(4, 96), ids(5, 96)
    for p in (a, b):
        await engine.generate(greq(p, "x"))
    pool = engine.pool
    before = (list(pool.cached), engine.stats(), pool.evictions)
    for _ in range(5):
        assert engine.prefix_cache_probe(a).hit_tokens == 80  # whole blocks before the last token
    assert (list(pool.cached), engine.stats(), pool.evictions) == before  # no work queued, LRU untouched
