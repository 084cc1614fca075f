"""Session scheduler: every branch of the admission decision, ownership windows, preemption.

Most tests drive the branch logic through `ProbeEngine`, a probe-controllable stand-in whose KV
usage and prefix hit ratio the test sets (or makes fail): the decision table is what is tested
here. `test_real_prefix_probe_*` checks the same gate over real embedded replicas.
"""

from __future__ import annotations

import asyncio

import pytest

from legorl.serving.pool import ReplicaPool
from legorl.serving.pool_manager import PoolManager
from legorl.serving.scheduler import AdmissionAborted, AttemptPreempted, SchedulerConfig, SessionScheduler
from legorl.serving.types import GenerateRequest, PrefixProbe, SamplingParams, TokenOutput

FAST = SchedulerConfig(wait_poll_sec=0.02, idle_grace_sec=5.0)


class ProbeEngine:
    """An engine whose probes the test controls; `generate` finishes when `gate` is set."""

    weight_version = 0
    max_model_len = 4096

    def __init__(self, usage: float = 0.0, ratio: float = 0.0, budget: int | None = None):
        self.usage, self.ratio, self.budget = usage, ratio, budget
        self.fail_usage = self.fail_prefix = False
        self.prefix_probes = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.crash: BaseException | None = None

    def kv_cache_usage(self) -> float:
        if self.fail_usage:
            raise NotImplementedError("no KV metric")
        return self.usage

    def prefix_cache_probe(self, ids: list[int]) -> PrefixProbe:
        self.prefix_probes += 1
        if self.fail_prefix:
            raise NotImplementedError("no prefix probe")
        return PrefixProbe(int(self.ratio * len(ids)), len(ids))

    def stats(self):
        if self.budget is None:
            raise NotImplementedError
        return type("S", (), {"kv_budget_tokens": self.budget})()

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        await self.gate.wait()
        if self.crash is not None:
            raise self.crash
        return TokenOutput(request.request_id, len(request.prompt_ids), [7], [-0.1], "length", 0)

    async def close(self) -> None:
        return None


def sched(engine: ProbeEngine, **kw) -> SessionScheduler:
    cfg = SchedulerConfig(**{**FAST.__dict__, **kw})
    return SessionScheduler(lambda sid: ("r0", engine), cfg)  # type: ignore[arg-type, return-value]


IDS = list(range(10, 74))


async def pending(coro, wait: float = 0.08) -> asyncio.Task:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(wait)
    assert not task.done(), "should be waiting for admission"
    return task


async def test_open_below_watermark_without_prefix_probe():
    eng = ProbeEngine(usage=0.5)
    s = sched(eng)
    lease = await s.acquire("a", IDS)
    assert lease.reason == "open" and eng.prefix_probes == 0 and not s.reserved("a")
    lease.release()


async def test_resident_prefix_admits_and_reserves_under_pressure():
    eng = ProbeEngine(usage=0.9, ratio=0.85)
    s = sched(eng)
    async with await s.acquire("a", IDS) as lease:
        assert lease.reason == "resident_prefix" and s.reserved("a")
    assert s.reserved("a")  # idle grace window after release


async def test_prefix_probe_unavailable_admits_never_hangs():
    eng = ProbeEngine(usage=0.99)
    eng.fail_prefix = True
    s = sched(eng)
    assert (await asyncio.wait_for(s.acquire("a", IDS), 1)).reason == "prefix_probe_unavailable"


async def test_probes_absent_everything_admitted_immediately():
    eng = ProbeEngine()
    eng.fail_usage = eng.fail_prefix = True
    s = sched(eng, wait_poll_sec=30)
    leases = await asyncio.wait_for(asyncio.gather(*(s.acquire(f"s{i}", IDS) for i in range(20))), 1)
    assert {le.reason for le in leases} == {"kv_probe_unavailable"} and s.queue_len == 0


async def test_waits_until_another_session_releases():
    eng = ProbeEngine(usage=0.95, ratio=0.1)
    s = sched(eng, wait_poll_sec=30)  # the wake-up must come from the release, not the poll
    eng.ratio = 0.9
    holder = await s.acquire("holder", IDS)
    eng.ratio = 0.1
    task = await pending(s.acquire("b", IDS))
    assert s.queue_len == 1 and s.metrics()["sched/queue_len"] == 1
    eng.usage = 0.4
    holder.release()
    lease = await asyncio.wait_for(task, 1)
    assert lease.reason == "open" and lease.waited_s > 0
    m = s.metrics()
    assert m["sched/waited"] == 1 and m["sched/wait_time_max_s"] > 0 and m["sched/queue_len"] == 0


async def test_waits_then_retries_on_poll():
    eng = ProbeEngine(usage=0.95, ratio=0.1)
    s = sched(eng, wait_poll_sec=0.05)
    task = await pending(s.acquire("b", IDS[:50]))
    eng.ratio = 0.8  # exactly the threshold (40 of 50 tokens resident) admits
    assert (await asyncio.wait_for(task, 1)).reason == "resident_prefix"


async def test_reserved_session_skips_probing_on_its_next_turn():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    s = sched(eng)
    (await s.acquire("a", IDS)).release()  # turn 1 under pressure: reserved
    eng.ratio, eng.usage = 0.0, 1.0  # its prefix got evicted meanwhile, KV is full
    probes = eng.prefix_probes
    lease = await asyncio.wait_for(s.acquire("a", IDS + [5] * 40), 1)
    assert lease.reason == "reserved_session" and eng.prefix_probes == probes
    await pending(s.acquire("other", IDS))  # a session without a reservation waits


async def test_grace_window_expires_and_wakes_waiters():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    s = sched(eng, idle_grace_sec=0.15, wait_poll_sec=0.03)
    (await s.acquire("a", IDS)).release()
    assert s.reserved("a")
    await asyncio.sleep(0.2)
    assert not s.reserved("a") and s.metrics()["sched/expired_reservations"] == 1
    eng.ratio = 0.0
    await pending(s.acquire("a", IDS))  # back to probing: no longer admitted


async def test_finish_session_ends_the_window_and_state():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    s = sched(eng)
    (await s.acquire("a", IDS)).release()
    s.finish_session("a")
    assert not s.reserved("a") and s.session_info("a") == {}


async def test_newer_attempt_preempts_the_waiting_older_one():
    eng = ProbeEngine(usage=0.95, ratio=0.0)
    s = sched(eng, wait_poll_sec=30)
    old = await pending(s.acquire("a", IDS))
    other_branch = await pending(s.acquire("a", IDS, attempt_key="sub"), 0.01)
    new = await pending(s.acquire("a", IDS), 0.05)
    with pytest.raises(AttemptPreempted):
        await asyncio.wait_for(old, 1)  # aborted at once, not at the next poll
    assert s.session_info("a")["num_preempted"] == 1 and s.metrics()["sched/num_preempted"] == 1
    assert not other_branch.done() and not new.done()  # only the newest attempt competes
    eng.ratio = 0.9
    (await s.acquire("x", IDS)).release()  # a release wakes the waiters
    reasons = {(await asyncio.wait_for(t, 1)).reason for t in (new, other_branch)}
    assert reasons == {"resident_prefix", "reserved_session"}  # the first admitted one reserves "a"


async def test_pending_leases_count_towards_the_watermark():
    eng = ProbeEngine(usage=0.0, budget=100)
    s = sched(eng)
    first = await s.acquire("a", IDS)  # 64 of 100 tokens admitted, not yet visible to the engine
    second = await s.acquire("b", IDS[:30])  # 0.64 < 0.85: open
    assert second.reason == "open"
    task = await pending(s.acquire("c", IDS))  # 0.94 counted: waits
    first.release()
    assert (await asyncio.wait_for(task, 1)).reason == "open"


async def test_a_parallel_branch_of_the_session_is_not_a_retry():
    eng = ProbeEngine(usage=0.95, ratio=0.0)
    s = sched(eng, wait_poll_sec=30)
    main = await pending(s.acquire("a", IDS))
    sub = await pending(s.acquire("a", [3] * 64), 0.01)  # a sub-agent: different history
    retry = await pending(s.acquire("a", [*IDS, 9, 9]), 0.05)  # the main call again, history intact
    with pytest.raises(AttemptPreempted):
        await asyncio.wait_for(main, 1)
    assert not sub.done() and not retry.done() and s.session_info("a")["num_preempted"] == 1
    s.finish_session("a")
    for t in (sub, retry):
        with pytest.raises(AdmissionAborted):
            await asyncio.wait_for(t, 1)


def test_production_poll_floor():
    assert SchedulerConfig(wait_poll_sec=0.01).floored().wait_poll_sec == 5.0
    assert SchedulerConfig().wait_poll_sec == 5.0 and SchedulerConfig().high_watermark == 0.85
    with pytest.raises(ValueError):
        SessionScheduler(lambda s: ("r", None), SchedulerConfig(wait_poll_sec=0))  # type: ignore[arg-type]


# -- through the manager: leases never leak ----------------------------------------------------------
def manager(eng: ProbeEngine, **kw) -> PoolManager:
    cfg = SchedulerConfig(**{**FAST.__dict__, **kw})
    return PoolManager(ReplicaPool([eng]), scheduler=cfg)  # type: ignore[list-item]


def greq(sid: str) -> GenerateRequest:
    return GenerateRequest(IDS, SamplingParams(max_tokens=1), session_id=sid)


async def test_cancelled_caller_releases_its_lease():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    mgr = manager(eng)
    eng.gate.clear()
    task = asyncio.ensure_future(mgr.generate(greq("a")))
    await asyncio.sleep(0.05)
    assert mgr.scheduler.session_info("a")["active"] == 1 and mgr.scheduler.reserved("a")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mgr.scheduler.session_info("a")["active"] == 0 and not mgr.scheduler.reserved("a")
    assert mgr.scheduler._pending == {}  # no leaked KV claim
    # cancelled while still waiting: leaves the queue
    eng.ratio = 0.0
    waiting = await pending(mgr.generate(greq("b")))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert mgr.scheduler.queue_len == 0


async def test_crashed_call_releases_its_lease():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    eng.crash = RuntimeError("scaffold blew up")
    mgr = manager(eng)
    with pytest.raises(RuntimeError):
        await mgr.generate(greq("a"))
    assert mgr.scheduler.session_info("a")["active"] == 0 and not mgr.scheduler.reserved("a")


async def test_abort_and_end_session_while_waiting_return_abort_outputs():
    eng = ProbeEngine(usage=0.95, ratio=0.0)
    mgr = manager(eng, wait_poll_sec=30)
    r = greq("a")
    task = await pending(mgr.generate(r))
    await mgr.abort(r.request_id)
    out = await asyncio.wait_for(task, 1)
    assert out.finish_reason == "abort" and out.token_ids == []
    task = await pending(mgr.generate(greq("b")))
    mgr.end_session("b")
    assert (await asyncio.wait_for(task, 1)).finish_reason == "abort"
    assert mgr.metrics()["manager/aborted_before_admission"] == 2


async def test_success_path_metrics():
    eng = ProbeEngine(usage=0.2)
    mgr = manager(eng)
    await asyncio.gather(*(mgr.generate(greq(f"s{i}")) for i in range(5)))
    m = mgr.metrics()
    assert m["sched/admit/open"] == 5 and m["sched/queue_len"] == 0 and "pool/r0/prefix_hit_rate" in m


# -- claims: the reserved working set stays within the KV budget -----------------------------------
async def test_pressure_episode_makes_open_admissions_reserve():
    eng = ProbeEngine(usage=0.95, ratio=0.9)
    s = sched(eng)
    (await s.acquire("a", IDS)).release()  # seen above the watermark: an episode starts
    s.finish_session("a")
    eng.usage = 0.5  # a dip
    lease = await s.acquire("b", IDS)
    assert lease.reason == "open" and s.reserved("b")


async def test_idle_reservation_claims_kv_against_newcomers():
    eng = ProbeEngine(usage=0.9, budget=70, ratio=0.9)
    s = sched(eng)
    (await s.acquire("a", IDS)).release()  # resident, reserved: its 64 tokens stay claimed
    eng.usage = 0.3  # the engine sees free KV, but "a" will need 64/70 of it after its tool call
    task = await pending(s.acquire("b", IDS[:30]))  # resident too, but cannot reserve beside "a"
    s.finish_session("a")
    assert (await asyncio.wait_for(task, 1)).reason == "open"


async def test_reserved_session_that_outgrew_the_kv_yields():
    eng = ProbeEngine(usage=0.95, ratio=0.9, budget=200)
    s = sched(eng)
    (await s.acquire("a", IDS)).release()
    (await s.acquire("b", IDS)).release()  # 128 of 200 tokens claimed
    eng.ratio = 0.0
    grown = IDS + list(range(100, 180))  # a's next turn: 144 tokens, 64 + 144 > 200
    task = await pending(s.acquire("a", grown))
    assert s.metrics()["sched/yielded_reservations"] == 1 and not s.reserved("a") and s.reserved("b")
    s.finish_session("b")
    eng.usage = 0.2
    assert (await asyncio.wait_for(task, 1)).reason == "open"


async def test_session_less_calls_leave_no_reservation():
    eng = ProbeEngine(usage=0.95, ratio=0.9, budget=10_000)
    mgr = manager(eng)
    await mgr.generate(GenerateRequest(IDS, SamplingParams(max_tokens=1)))
    assert mgr.scheduler.metrics()["sched/reservations"] == 0 and mgr.scheduler._pending == {}


async def test_max_wait_admits_after_the_bound():
    eng = ProbeEngine(usage=0.99, ratio=0.0)
    s = sched(eng, max_wait_sec=0.1, wait_poll_sec=30)
    lease = await asyncio.wait_for(s.acquire("a", IDS), 1)
    assert lease.reason == "max_wait" and lease.waited_s >= 0.1
