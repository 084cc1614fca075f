"""Replicas in their own processes: the full Engine surface over the pipe, and a hard kill failing
over to the surviving replica without a failed call."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.pool import PoolWeightSync, ReplicaPool
from legorl.serving.pool_manager import PoolManager
from legorl.serving.replica_proc import ProcessReplica
from legorl.serving.types import ContextLengthError, EngineClosedError, GenerateRequest, SamplingParams


def prompt(session: int, turn: int) -> list[int]:
    return [(session * 101 + i * 7) % 3000 + 10 for i in range(48 + 16 * turn)]


async def test_process_replicas_serve_sync_and_fail_over(tiny_llama_dir):
    kw = {"kv_budget_tokens": 1024, "num_threads": 1}
    # a mixed pool (spawning a second child would double the startup cost of this test)
    r0 = EmbeddedEngine.from_pretrained(tiny_llama_dir, **kw)
    r1 = await ProcessReplica.start(tiny_llama_dir, **kw)
    pool = ReplicaPool([r0, r1])
    mgr = PoolManager(pool)
    try:
        assert mgr.max_model_len == 2048

        async def session(s: int, turns: range) -> None:
            for t in turns:
                out = await mgr.generate(GenerateRequest(prompt(s, t), SamplingParams(temperature=0, max_tokens=3),
                                                         session_id=f"s{s}"))
                assert len(out.token_ids) == 3 and out.finish_reason == "length"

        await asyncio.gather(*(session(s, range(2)) for s in range(4)))
        assert {mgr.balancer.replica_of(f"s{s}") for s in range(4)} == {"r0", "r1"}
        # probes and stats are answered synchronously over the pipe
        remote = next(s for s in range(4) if mgr.balancer.replica_of(f"s{s}") == "r1")
        assert r1.prefix_cache_probe(prompt(remote, 1)).hit_tokens >= 48
        assert 0.0 <= r1.kv_cache_usage() < 1.0 and r1.stats().requests_finished >= 2
        lps = await mgr.prompt_logprobs(prompt(remote, 0), session_id=f"s{remote}")
        assert lps[0] is None and all(x is not None and x < 0 for x in lps[1:])
        with pytest.raises(ContextLengthError):  # typed errors survive the pipe
            await r1.generate(GenerateRequest(list(range(10, 1100)), SamplingParams(max_tokens=2)))
        # a weight sync through the pool reaches both processes
        state = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).state_dict()
        state = {k: v * 1.01 for k, v in state.items() if k.endswith("norm.weight")}
        assert await PoolWeightSync(pool).push(state) == 1
        assert r0.weight_version == r1.weight_version == mgr.weight_version == 1
        await r1.sleep()  # serving.free_kv_during_update over the pipe: the child frees its KV pool until resume
        assert r1.stats().kv_bytes == 0 and r1.stats().paused
        await r1.resume()
        assert r1.stats().kv_bytes == r0.stats().kv_bytes > 0 and not r1.stats().paused
        # hard kill: pending calls fail over, the survivors keep their pins
        survivors = {f"s{s}" for s in range(4) if mgr.balancer.replica_of(f"s{s}") == "r0"}
        r1.kill()
        await asyncio.gather(*(session(s, range(2, 4)) for s in range(4)))
        assert not pool.get("r1").healthy
        assert all(mgr.balancer.replica_of(f"s{s}") == "r0" for s in range(4))
        assert mgr.balancer.counters["repins"] == 4 - len(survivors)
        with pytest.raises(EngineClosedError):
            await r1.generate(GenerateRequest(prompt(0, 0)))
    finally:
        await mgr.close()
