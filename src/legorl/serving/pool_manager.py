"""`PoolManager`: the `ServerManager` over a replica pool (admission -> balancing -> engine).

A call is admitted by the optional `SessionScheduler` (which probes the replica the balancer would
pick), routed by the `LoadBalancer` (sticky per session) and run on that replica. If the replica
fails under the call (closed, process died, connection lost), it is marked dead and the call is
retried on another healthy replica, so callers see no error while any replica is left; the
session is re-pinned and the re-prefilled prompt tokens are counted. The proxy uses this exactly
as it uses `SingleReplicaManager`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from legorl.serving.balancer import LoadBalancer
from legorl.serving.manager import adapter_kw
from legorl.serving.pool import REPLICA_FAILURES, NoHealthyReplicaError, Replica, ReplicaPool
from legorl.serving.scheduler import AdmissionAborted, SchedulerConfig, SessionScheduler
from legorl.serving.types import CountingSink, Engine, EngineClosedError, GenerateRequest, TokenOutput

T = TypeVar("T")


class ReplicaDownError(EngineClosedError):
    """The call's replica left routing while the call was pending (it is retried elsewhere)."""

log = logging.getLogger(__name__)


class PoolManager:
    """Implements `legorl.serving.manager.ServerManager` over a `ReplicaPool`."""

    def __init__(
        self,
        pool: ReplicaPool,
        balancer: LoadBalancer | None = None,
        scheduler: SessionScheduler | SchedulerConfig | None = None,
        max_model_len: int | None = None,
    ):
        self.pool = pool
        self.balancer = balancer or LoadBalancer(pool)
        if isinstance(scheduler, SchedulerConfig):
            scheduler = SessionScheduler(self._target, scheduler)
        self.scheduler = scheduler
        self._max_model_len = max_model_len
        self._inflight: dict[str, Replica] = {}
        self.counters = dict.fromkeys(["failovers", "repin_prefill_tokens", "aborted_before_admission"], 0)

    # -- ServerManager ----------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        """The oldest version any healthy replica serves (they agree outside a weight sync)."""
        return min((e.weight_version for e in self.pool.engines()), default=0)

    @property
    def max_model_len(self) -> int:
        if self._max_model_len is None:
            lens = [getattr(e, "max_model_len", None) for e in self.pool.engines(healthy_only=False)]
            known = [int(n) for n in lens if n]
            if not known:
                raise ValueError("max_model_len is unknown: pass it to PoolManager")
            self._max_model_len = min(known)
        return self._max_model_len

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        lease = None
        gate_id = request.session_id or f"call:{request.request_id}"  # a session-less call is its own session
        if self.scheduler is not None:
            try:
                lease = await self.scheduler.acquire(gate_id, request.prompt_ids, request_id=request.request_id,
                                                     adapter=request.adapter)
            except AdmissionAborted:
                self.counters["aborted_before_admission"] += 1
                return TokenOutput(request.request_id, len(request.prompt_ids), [], [], "abort", self.weight_version)
        ok = False
        try:
            out = await self._run_generate(request, lease.replica_id if lease else None)
            ok = True
            return out
        finally:
            if lease is not None:
                lease.release(failed=not ok)
                if request.session_id is None and self.scheduler is not None:
                    self.scheduler.finish_session(gate_id)  # no next turn to keep KV for

    async def prompt_logprobs(
        self, token_ids: list[int], session_id: str | None = None, temperature: float = 1.0,
        adapter: str | None = None,
    ) -> list[float | None]:
        """On the session's replica (not gated: it runs beside a generate the gate admitted)."""
        while True:
            rep, _ = self.balancer.route(session_id)
            rep.in_flight += 1
            try:
                return await self._on(rep, rep.engine.prompt_logprobs(token_ids, temperature=temperature,
                                                                           **adapter_kw(adapter)))
            except REPLICA_FAILURES as exc:
                self._failed(rep, exc)
            finally:
                rep.in_flight -= 1

    async def abort(self, request_id: str) -> TokenOutput | None:
        if self.scheduler is not None and self.scheduler.abort(request_id):
            return None  # it was still waiting: its generate returns an empty 'abort' output
        rep = self._inflight.get(request_id)
        if rep is None:
            return None
        try:
            return await rep.engine.abort(request_id)
        except REPLICA_FAILURES:
            return None

    def end_session(self, session_id: str) -> None:
        self.balancer.end_session(session_id)
        if self.scheduler is not None:
            self.scheduler.finish_session(session_id)

    # -- extras -----------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        out = self.pool.metrics()
        out.update(self.balancer.metrics())
        out.update({f"manager/{k}": float(v) for k, v in self.counters.items()})
        if self.scheduler is not None:
            out.update(self.scheduler.metrics())
        return out

    async def close(self) -> None:
        await self.pool.close()

    # -- internals --------------------------------------------------------------------------------
    def _target(self, session_id: str) -> tuple[str, Engine]:
        rep = self.balancer.peek(session_id)
        return rep.id, rep.engine

    async def _run_generate(self, request: GenerateRequest, prefer: str | None) -> TokenOutput:
        streamed = CountingSink(request.on_tokens) if request.on_tokens is not None else None
        if streamed is not None:
            request = dataclasses.replace(request, on_tokens=streamed)
        while True:
            rep, kind = self.balancer.route(request.session_id, prefer, request.prompt_ids)
            prefer = None
            rep.in_flight += 1
            self._inflight[request.request_id] = rep
            try:
                out = await self._on(rep, rep.engine.generate(request))
            except REPLICA_FAILURES as exc:
                self._failed(rep, exc)
                if streamed is not None and streamed.n:  # a rerun elsewhere would contradict what was sent
                    raise EngineClosedError(f"replica {rep.id} failed after {streamed.n} streamed tokens") from exc
                continue
            finally:
                rep.in_flight -= 1
                self._inflight.pop(request.request_id, None)
            rep.record(out.prompt_len, out.cached_prompt_tokens)
            if kind == "repin":
                self.counters["repin_prefill_tokens"] += out.prompt_len - out.cached_prompt_tokens
            return out

    @staticmethod
    async def _on(rep: Replica, coro: Coroutine[Any, Any, T]) -> T:
        """Await an engine call, giving up on it as soon as its replica is marked down (a call
        submitted while an engine shuts down may otherwise never be answered)."""
        if rep.down.is_set():
            coro.close()
            raise ReplicaDownError(f"replica {rep.id} is down")
        call = asyncio.ensure_future(coro)
        down = asyncio.ensure_future(rep.down.wait())
        finished = False
        try:
            await asyncio.wait({call, down}, return_when=asyncio.FIRST_COMPLETED)
            finished = call.done()
        finally:
            down.cancel()
            if not finished:
                call.cancel()
        if not finished:
            raise ReplicaDownError(f"replica {rep.id} went down under the call")
        return call.result()

    def _failed(self, rep: Replica, exc: BaseException) -> None:
        """The replica failed under a call: take it out of routing; the caller retries elsewhere."""
        self.pool.mark_dead(rep.id, repr(exc))
        self.counters["failovers"] += 1
        if not self.pool.healthy():
            raise NoHealthyReplicaError(f"no healthy replica left (last failure on {rep.id}: {exc!r})") from exc


async def create_pool(
    model: str | Path,
    n_replicas: int,
    *,
    placement: Literal["thread", "process"] = "thread",
    engine_kwargs: dict[str, Any] | None = None,
    ids: Sequence[str] | None = None,
    share_weights: bool = False,
    shared_model: Any = None,
) -> ReplicaPool:
    """Start `n_replicas` embedded engines, in this process (one thread each) or one process each.

    `share_weights` (threads only): the replicas serve one model object, each with its own KV pool and thread,
    so N single-threaded replicas cost one copy of the weights (on 2 cores, two 1-thread replicas decode ~1.4x
    the tokens/s of one: docs/agent-lookact.md). A sharer refuses LoRA adapters; an MoE model gets a copy per replica
    (each engine records the routing of its own forwards). `shared_model` (threads only): every replica serves
    that model object of this process (a synchronous run's trainer model) instead of loading `model`."""
    kwargs = dict(engine_kwargs or {})
    engines: list[Engine] = []
    if placement == "process":
        if shared_model is not None:
            raise ValueError("shared_model (a model object of this process) needs placement = 'thread'")
        from legorl.serving.replica_proc import ProcessReplica

        engines = list(await ProcessReplica.start_many(model, n_replicas, **kwargs))
    else:
        from legorl.serving.embedded import EmbeddedEngine

        first: EmbeddedEngine | None = None
        for i in range(n_replicas):
            # distinct seeds: unseeded requests on two replicas must not draw the same samples
            seed = int(kwargs.get("seed", 0)) + 7919 * i
            own = {"name": f"replica{i}", **kwargs, "seed": seed}
            served = shared_model if shared_model is not None else (
                first.model if first is not None and first.shares_weights else None)
            if served is not None:  # the model's own dtype and device
                own.pop("dtype", None)
                own.pop("device", None)
                eng = EmbeddedEngine(served, **own, shares_weights=True)
            else:
                eng = EmbeddedEngine.from_pretrained(model, **own)
                if first is None:
                    eng.shares_weights = share_weights and n_replicas > 1 and not eng.recorder.enabled
                    first = eng
            await eng.start()
            engines.append(eng)
    return ReplicaPool(engines, ids)

