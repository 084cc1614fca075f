"""Replica pool membership, health events and weight sync over whatever replicas it holds."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.manager import ServerManager
from legorl.serving.pool import PoolWeightSync, ReplicaPool
from legorl.serving.pool_manager import PoolManager
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync


class _Stub:
    weight_version = 0
    max_model_len = 128

    async def close(self) -> None:
        self.closed = True


async def test_membership_events_and_metrics():
    events: list[tuple[str, str]] = []
    pool = ReplicaPool([_Stub()], ids=["a"])  # type: ignore[list-item]
    pool.subscribe(lambda ev, rep: events.append((ev, rep.id)))
    b = pool.add(_Stub())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pool.add(_Stub(), "a")  # type: ignore[arg-type]
    pool.mark_dead(b.id, "boom")
    pool.mark_dead(b.id, "again")  # idempotent
    assert [r.id for r in pool.healthy()] == ["a"] and b.down.is_set() and b.failures == 1
    pool.mark_healthy(b.id)
    assert not b.down.is_set()
    removed = await pool.remove("a")
    assert removed.engine.closed and len(pool) == 1
    assert events == [("added", b.id), ("dead", b.id), ("revived", b.id), ("removed", "a")]
    m = pool.metrics()
    assert m["pool/replicas"] == 1 and m[f"pool/{b.id}/healthy"] == 1


async def test_manager_satisfies_protocol_and_weight_sync_follows_membership(tiny_llama_dir):
    kw = {"kv_budget_tokens": 1024, "num_threads": 1}
    pool = ReplicaPool([EmbeddedEngine.from_pretrained(tiny_llama_dir, **kw)])
    mgr = PoolManager(pool)
    try:
        assert isinstance(mgr, ServerManager)
        sync = PoolWeightSync(pool)
        late = pool.add(EmbeddedEngine.from_pretrained(tiny_llama_dir, **kw))
        state = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).state_dict()
        state = {k: v * 0.5 for k, v in state.items() if k.endswith("norm.weight")}
        assert await sync.push(state) == 1
        assert late.engine.weight_version == 1 and mgr.weight_version == 1
        # the stock WeightSync works over the pool's engines too
        assert await WeightSync(pool.engines()).push(state) == 2
        # two sessions with different prompts (one prompt would follow its first session: the balancer's affinity)
        outs = [await mgr.generate(GenerateRequest([5, 6, 7, 8 + i], SamplingParams(temperature=0, max_tokens=2),
                                                   session_id=f"s{i}")) for i in range(2)]
        assert {o.weight_version for o in outs} == {2}
        assert sorted(r.requests for r in pool.all()) == [1, 1]
    finally:
        await mgr.close()


async def test_proxy_runs_unchanged_over_the_pool(tiny_llama_dir):
    import openai

    from legorl.models.chat import load_tokenizer
    from legorl.proxy import ProxyServer
    from legorl.serving.pool_manager import create_pool
    from legorl.serving.scheduler import SchedulerConfig

    pool = await create_pool(tiny_llama_dir, 2, engine_kwargs={"kv_budget_tokens": 4096, "num_threads": 1})
    mgr = PoolManager(pool, scheduler=SchedulerConfig(wait_poll_sec=0.05))
    proxy = ProxyServer(mgr, load_tokenizer(tiny_llama_dir))
    await proxy.start()
    try:
        sessions = [proxy.open_session() for _ in range(4)]

        async def chat(s) -> None:
            c = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
            msgs = [{"role": "user", "content": f"task {s.id[:4]}"}]
            for turn in range(2):
                r = await c.chat.completions.create(model="p", messages=msgs, max_tokens=3, temperature=0)
                msgs += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                         {"role": "user", "content": f"tool output {turn}"}]

        await asyncio.gather(*(chat(s) for s in sessions))
        pins = {mgr.balancer.replica_of(s.id) for s in sessions}
        assert pins == {"r0", "r1"}
        for s in sessions:
            rec = await proxy.close_session(s.id)
            assert rec.counters.calls == 2 and rec.counters.cached_prompt_tokens > 0
        m = mgr.metrics()
        assert m["balancer/pinned_sessions"] == 0 and m["balancer/sticky_hits"] == 4 and m["sched/admit/open"] == 8
    finally:
        await proxy.close()
        await mgr.close()
