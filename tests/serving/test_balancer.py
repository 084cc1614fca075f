"""Sticky routing, even spread of new sessions, failover of a killed replica, LRU-bounded pins."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from legorl.serving.balancer import LoadBalancer
from legorl.serving.pool import ReplicaPool
from legorl.serving.pool_manager import PoolManager, create_pool
from legorl.serving.types import GenerateRequest, SamplingParams

ENGINE = {"kv_budget_tokens": 4096, "num_threads": 1}


def turn_prompt(session: int, turn: int) -> list[int]:
    """A session's prompt grows by a 'tool result' each turn; sessions differ from the first token."""
    return [100 + session] + [(session * 131 + t * 7 + i) % 4000 + 10 for t in range(turn + 1) for i in range(24)]


def req(session: int, turn: int, max_tokens: int = 2) -> GenerateRequest:
    return GenerateRequest(turn_prompt(session, turn), SamplingParams(temperature=0, max_tokens=max_tokens),
                           session_id=f"s{session}")


@pytest.fixture
async def manager(tiny_llama_dir):
    pool = await create_pool(tiny_llama_dir, 2, engine_kwargs=ENGINE)
    mgr = PoolManager(pool)
    yield mgr
    await mgr.close()


async def run_session(mgr: PoolManager, s: int, turns: int, seen: dict[str, list[str]], gap: float = 0.0) -> None:
    for t in range(turns):
        r = req(s, t)
        await mgr.generate(r)
        seen[r.session_id].append(mgr.balancer.replica_of(r.session_id) or "?")
        await asyncio.sleep(gap)


async def test_sticky_20_sessions_5_turns_two_replicas(manager):
    seen: dict[str, list[str]] = defaultdict(list)
    await asyncio.gather(*(run_session(manager, s, 5, seen) for s in range(20)))
    assert all(len(set(v)) == 1 for v in seen.values()), seen
    per = defaultdict(int)
    for v in seen.values():
        per[v[0]] += 1
    assert set(per) == {"r0", "r1"} and abs(per["r0"] - per["r1"]) <= 1, per
    m = manager.metrics()
    assert m["balancer/new_sessions"] == 20 and m["balancer/sticky_hits"] == 80
    # the growing prompts hit each replica's prefix cache from turn 2 on
    assert m["pool/r0/prefix_hit_rate"] > 0.5 and m["pool/r1/prefix_hit_rate"] > 0.5


async def test_sessions_arriving_one_by_one_still_split_evenly(manager):
    seen: dict[str, list[str]] = defaultdict(list)
    for s in range(7):
        await run_session(manager, s, 2, seen)
    first = [v[0] for v in seen.values()]
    assert abs(first.count("r0") - first.count("r1")) <= 1


async def test_killed_replica_sessions_move_no_call_fails(manager):
    seen: dict[str, list[str]] = defaultdict(list)
    await asyncio.gather(*(run_session(manager, s, 2, seen) for s in range(8)))
    pins = {s: v[-1] for s, v in seen.items()}
    victim = manager.pool.get("r1")

    async def kill_soon() -> None:
        await asyncio.sleep(0.05)
        await victim.engine.close()  # in-flight calls on r1 fail with EngineClosedError

    results = await asyncio.gather(
        kill_soon(), *(run_session(manager, s, 4, seen, gap=0.01) for s in range(8)), return_exceptions=True
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert not victim.healthy
    for s, v in seen.items():
        assert v[-1] == "r0"
        if pins[s] == "r0":
            assert set(v) == {"r0"}  # the survivors' sessions never moved
    m = manager.metrics()
    assert m["balancer/repins"] == sum(1 for p in pins.values() if p == "r1")
    assert m["manager/repin_prefill_tokens"] > 0


async def test_replica_added_at_run_time_takes_new_sessions(tiny_llama_dir):
    pool = await create_pool(tiny_llama_dir, 1, engine_kwargs=ENGINE)
    mgr = PoolManager(pool)
    try:
        await mgr.generate(req(0, 0))
        extra = await create_pool(tiny_llama_dir, 1, engine_kwargs=ENGINE)
        rep = pool.add(extra.all()[0].engine, "late")
        await mgr.generate(req(1, 0))
        assert mgr.balancer.replica_of("s1") == "late" and rep.requests == 1
        await mgr.generate(req(0, 1))
        assert mgr.balancer.replica_of("s0") == "r0"
        await pool.remove("late")
        await mgr.generate(req(1, 1))  # re-pinned to the remaining replica
        assert mgr.balancer.replica_of("s1") == "r0" and mgr.balancer.counters["repins"] == 1
    finally:
        await mgr.close()


class _Stub:
    """Just enough of an engine for routing-only tests (no model)."""

    weight_version = 0
    max_model_len = 64


def test_pins_are_lru_bounded_and_cleared_by_end_session():
    pool = ReplicaPool([_Stub(), _Stub()])  # type: ignore[list-item]
    lb = LoadBalancer(pool, max_sessions=3)
    for s in "abcd":
        lb.pick(s)
    assert lb.replica_of("a") is None and lb.counters["evicted_pins"] == 1
    lb.pick("b")  # refresh b: c is now the oldest
    lb.pick("e")
    assert lb.replica_of("c") is None and lb.replica_of("b") is not None
    lb.end_session("b")
    assert lb.replica_of("b") is None and lb.metrics()["balancer/pinned_sessions"] == 2


def test_round_robin_cycles_per_call_and_ignores_sessions():
    pool = ReplicaPool([_Stub(), _Stub(), _Stub()])  # type: ignore[list-item]
    lb = LoadBalancer(pool, policy="round_robin")
    assert lb.peek("x").id == "r0"
    assert [lb.pick("x").id for _ in range(4)] == ["r0", "r1", "r2", "r0"]
    pool.mark_dead("r1")
    assert [lb.pick("x").id for _ in range(2)] == ["r0", "r2"]


def test_least_loaded_prefers_fewer_in_flight_then_stable_order():
    pool = ReplicaPool([_Stub(), _Stub()])  # type: ignore[list-item]
    lb = LoadBalancer(pool)
    pool.get("r0").in_flight = 2
    assert lb.pick("a").id == "r1"
    pool.get("r0").in_flight = 0
    assert lb.pick("b").id == "r0"  # fewer pinned sessions
    assert lb.pick("c").id == "r0"  # tie on both: insertion order
    pool.mark_dead("r0")
    assert lb.pick("b").id == "r1" and lb.counters["repins"] == 1


def test_a_group_with_one_first_prompt_stays_on_one_replica_within_the_slack():
    """A GRPO group's trials open with the same prompt: they follow the first of them (its prefill is reused)
    unless that replica is more than `affinity_slack` calls busier than the least loaded one."""
    pool = ReplicaPool([_Stub(), _Stub()])  # type: ignore[list-item]
    lb = LoadBalancer(pool, affinity_slack=2)
    group, other = [1, 2, 3, 4], [9, 8, 7]

    def call(session: str, prompt: list[int]) -> str:
        rep, _ = lb.route(session, prompt=prompt)
        rep.in_flight += 1  # as the manager does while the call runs
        return rep.id

    assert [call(f"g{i}", group) for i in range(3)] == ["r0", "r0", "r0"]
    assert call("g3", group) == "r1"  # r0 is 3 calls ahead of r1: past the slack
    assert call("o0", other) == "r1"  # another prompt: the least loaded
    assert lb.counters["affinity_hits"] == 2
    # a second turn of a session is sticky whatever its prompt; 0 turns affinity off
    assert lb.route("g0", prompt=other)[0].id == "r0"
    off = LoadBalancer(pool, affinity_slack=0)
    pool.get("r0").in_flight = pool.get("r1").in_flight = 0
    assert [off.route(f"x{i}", prompt=group)[0].id for i in range(2)] == ["r0", "r1"]
