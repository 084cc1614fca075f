"""Engine replicas as Ray actors (cluster/replica.py) on a local Ray, tiny model.

Real engines in real actor processes; deaths are real `ray.kill`s that Ray restarts. The one stand-in is
in `test_merged_update_for_an_engine_that_reloads_whole`: vLLM is not installed here, so an embedded engine
is told it does not take buckets (the flag vLLM lacks) to exercise the actor's merge-then-apply path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

pytest.importorskip("ray")

import pytest_asyncio
import torch

from legorl.cluster.placement import RolePlacement
from legorl.config.cluster import RoleSection
from legorl.config.serving import ServingSection
from legorl.serving.launch import EngineSpec, start_engines
from legorl.serving.replica_proc import ReplicaDiedError
from legorl.serving.types import ContextLengthError, GenerateRequest, InvalidRequestError, SamplingParams
from legorl.serving.weight_sync import RemoteBucket, WeightSync, bucket_nbytes

pytestmark = pytest.mark.asyncio(loop_scope="module")
PROMPTS = [list(range(5, 40)), [1, 300, 301, 302, 9, 9, 9, 17]]
PARAM = "model.layers.0.mlp.down_proj.weight"


def _spec(model_dir, n: int = 1) -> EngineSpec:
    return EngineSpec(model_dir, n_replicas=n, kv_budget_tokens=8192, max_model_len=512, threads_per_replica=1)


def _greedy(ids, n: int = 12, **kw) -> GenerateRequest:
    return GenerateRequest(list(ids), SamplingParams(temperature=0.0, max_tokens=n, **kw))


async def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(local_ray, tiny_llama_dir):
    """Two replica actors (max_restarts=1), and replica 0 in this process: what the actor must reproduce
    exactly. The local one loads while the actors boot (their own processes), to keep the module short."""
    from legorl.cluster.replica import replica_spec, start_replicas

    placement = RolePlacement.reserve("engines", RoleSection(), 2)
    booting = asyncio.ensure_future(start_replicas(_spec(tiny_llama_dir, 2), placement, max_restarts=1))
    await asyncio.sleep(0)  # the actors are created now
    [local] = await start_engines(replica_spec(_spec(tiny_llama_dir, 2), 0))
    reps = await booting
    yield reps, local
    for r in reps:
        await r.close()
    await local.close()
    placement.release()


@pytest.fixture(scope="module")
def replicas(stack):
    return stack[0]


@pytest.fixture(scope="module")
def local(stack):
    return stack[1]


async def test_generate_matches_in_process_engine(replicas, local):
    rep = replicas[0]
    assert (rep.name, rep.max_model_len, rep.block_size, rep.weight_version) == ("replica0", 512, 16, 0)
    assert rep.node_ip
    for ids in PROMPTS:
        for req in (_greedy(ids), GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=12, seed=7))):
            got, want = await rep.generate(req), await local.generate(dataclasses.replace(req))
            assert (got.token_ids, got.logprobs, got.finish_reason) == (want.token_ids, want.logprobs,
                                                                         want.finish_reason)
        assert await rep.prompt_logprobs(ids) == await local.prompt_logprobs(ids)
    await _until(lambda: rep.stats().requests_finished >= 4)  # the snapshot poller caught up
    assert 0.0 <= rep.kv_cache_usage() < 1.0
    # the answer, not the bound, is checked first: on a loaded machine one Ray round trip can pass 0.02 s
    rep.probe_timeout_s = 30.0
    try:
        probe = rep.prefix_cache_probe(PROMPTS[0] + [7] * 20)
        assert probe.hit_tokens == 32 and probe == local.prefix_cache_probe(PROMPTS[0] + [7] * 20)
        # a probe that overruns its bound reads as unavailable (the scheduler admits); its answer lands later
        rep.probe_timeout_s, ids = 1e-6, PROMPTS[0] + [8] * 20
        with pytest.raises(TimeoutError):
            rep.prefix_cache_probe(ids)
        await _until(lambda: tuple(ids) in rep._probes)
        assert rep.prefix_cache_probe(ids) == local.prefix_cache_probe(ids)  # from the memo: no round trip
    finally:
        rep.probe_timeout_s = 0.02


async def test_engine_errors_cross_the_actor_boundary_with_their_type(replicas, local):
    rep = replicas[0]
    long = list(range(3, 603))
    for call in (lambda e: e.generate(_greedy(long)), lambda e: e.prompt_logprobs(long)):
        with pytest.raises(ContextLengthError) as got:
            await call(rep)
        with pytest.raises(ContextLengthError) as want:
            await call(local)
        assert type(got.value) is ContextLengthError
        assert (str(got.value), got.value.prompt_tokens, got.value.limit) == (
            str(want.value), want.value.prompt_tokens, want.value.limit) and want.value.limit == 512
    with pytest.raises(InvalidRequestError) as bad:
        await rep.generate(GenerateRequest([5, 6], SamplingParams(max_tokens=0)))
    assert type(bad.value) is InvalidRequestError
    assert rep.down is None and (await rep.generate(_greedy(PROMPTS[1], 2))).token_ids  # still serving


async def test_remote_bucket_update_then_restore(local_ray, replicas, local):
    """Weights through a `RemoteBucket` (an object-store ref passed on to the actor), then back as a dict."""
    rep = replicas[1]
    base = await rep.generate(_greedy(PROMPTS[0]))
    original = local.model.state_dict()[PARAM].clone()
    changed = original + 0.5 * torch.randn(original.shape, generator=torch.Generator().manual_seed(0))
    bucket = {PARAM: changed}
    sync = WeightSync([rep])
    await sync.push(RemoteBucket(local_ray.put(bucket), bucket_nbytes(bucket), (PARAM,)), version=1)
    assert rep.weight_version == 1 and sync.last_bytes == changed.numel() * 4
    out = await rep.generate(_greedy(PROMPTS[0]))
    assert out.weight_version == 1 and out.logprobs != base.logprobs
    await _until(lambda: rep.stats().weight_version == 1)
    await sync.push({PARAM: original}, version=2)
    again = await rep.generate(_greedy(PROMPTS[0]))
    assert (again.weight_version, again.token_ids, again.logprobs) == (2, base.token_ids, base.logprobs)


async def test_collective_bucket_lands_bitwise(local_ray, replicas, local):
    """A bucket over a real gloo pair group (this process plays trainer rank 0's `Sender`): the actor's engine
    then answers exactly as the in-process engine given the same tensors (same tokens, same logprobs)."""
    from legorl.cluster.collective import CollectiveBucket, Sender
    from legorl.serving.pairgroup import pack

    rep = replicas[1]
    sender = Sender(timeout_s=20.0)
    port = sender.open("r1")
    await asyncio.gather(rep.join_transfer(local_ray.util.get_node_ip_address(), port, 20.0),
                         asyncio.to_thread(sender.finish, "r1"))
    original = {k: local.model.state_dict()[k].clone() for k in (PARAM, "model.norm.weight")}
    g = torch.Generator().manual_seed(1)
    bucket = {k: v + 0.3 * torch.randn(v.shape, generator=g) for k, v in original.items()}
    flat, dtypes, shapes = pack(bucket)
    meta = CollectiveBucket(None, flat.numel(), tuple(bucket), 0, dtypes, shapes, ("r1",))
    before = [(await local.generate(_greedy(ids))).logprobs for ids in PROMPTS]
    try:
        await asyncio.gather(WeightSync([rep]).push(meta, version=5), asyncio.to_thread(sender.send, flat, 0, ["r1"]))
        assert not sender.failed and rep.weight_version == 5
        await local.update_weights(bucket, 5)
        for ids, base in zip(PROMPTS, before, strict=True):
            got, want = await rep.generate(_greedy(ids)), await local.generate(_greedy(ids))
            assert (got.weight_version, got.token_ids, got.logprobs) == (5, want.token_ids, want.logprobs)
            assert want.logprobs != base  # the new weights changed the answer: the match is not vacuous
    finally:
        await local.update_weights(original, 0)
        await WeightSync([rep]).push(original, version=6)


async def test_cancelled_generate_is_aborted_on_the_actor(replicas):
    rep = replicas[0]
    before = rep.stats().generated_tokens
    task = asyncio.create_task(rep.generate(_greedy(PROMPTS[1], 400, ignore_eos=True)))
    await _until(lambda: rep.stats().running == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: rep.stats().running == 0)
    made = rep.stats().generated_tokens
    await asyncio.sleep(0.4)
    assert rep.stats().generated_tokens == made < before + 400  # stopped short of the 400 it was asked for


@pytest.mark.slow
async def test_killed_replica_fails_over_then_restarts_at_version_0(replicas, local):
    """Two actors behind the real pool, balancer and session scheduler (which reads the probes)."""
    from legorl.runtime.stack import build_manager

    manager = build_manager(list(replicas), ServingSection(scheduler={"enabled": True}))
    req = GenerateRequest(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True),
                          session_id="s1")
    task = asyncio.create_task(manager.generate(req))
    await _until(lambda: req.request_id in manager._inflight)
    victim_rep = manager._inflight[req.request_id]
    victim = victim_rep.engine
    await _until(lambda: victim.stats().generated_tokens > 0 and victim.stats().running == 1)
    victim.kill()
    out = await asyncio.wait_for(task, 60)
    want = await local.generate(dataclasses.replace(req))
    assert (out.finish_reason, out.token_ids, out.logprobs) == ("length", want.token_ids, want.logprobs)
    assert manager.counters["failovers"] == 1 and not victim_rep.healthy
    [survivor] = manager.pool.healthy()
    assert survivor.requests == 1 and survivor.engine is not victim
    # dead: the probes answer "full" without raising, calls fail fast as a replica failure
    assert victim.kv_cache_usage() == 1.0 and victim.stats().kv_cache_usage == 1.0
    assert victim.prefix_cache_probe(PROMPTS[0]).hit_tokens == 0
    with pytest.raises(ReplicaDiedError):
        await victim.generate(_greedy(PROMPTS[1], 2))
    info = await victim.wait_ready(120)
    assert info["weight_version"] == 0 and victim.weight_version == 0 and victim.restarts == 1
    assert victim.down is None
    assert (await victim.generate(_greedy(PROMPTS[0]))).token_ids == (await local.generate(_greedy(PROMPTS[0]))).token_ids


async def test_merged_update_for_an_engine_that_reloads_whole(local_ray, tiny_llama_dir, local):
    """The actor's vLLM path: buckets are held, then applied as one update on resume()."""
    from legorl.cluster.replica import ReplicaActor

    actor = ReplicaActor(_spec(tiny_llama_dir), 0)
    engine = await actor._ready()
    engine.accepts_weight_buckets = False  # the stand-in (see the module docstring)
    try:
        original = local.model.state_dict()
        names = ["model.norm.weight", PARAM]
        assert (await actor.pause())[1] == "ok"
        for i, name in enumerate(names):
            _, status, version = await actor.update_weights({name: original[name] * 0.5}, 3, "wait")
            assert status == "ok" and version == 0 and i + 1 == len(actor._merged)
        assert await actor.resume() == (actor.boot, "ok", 3)
        params = engine.model.state_dict()
        assert all(torch.equal(params[n], original[n] * 0.5) for n in names) and not actor._merged
    finally:
        await actor.close()
