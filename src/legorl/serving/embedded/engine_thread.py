"""The embedded engine's own thread: drain commands, apply barriers (weight updates, adapter loads, pauses and
sleeps), run one packed step and sample, finish requests. `EmbeddedEngine` (engine.py) is the asyncio side that
builds the state this reads and only enqueues commands; everything here runs on the engine thread, which alone
touches the model, the KV pool and the scheduler's queues.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping
from typing import Any

import torch

from legorl.serving.adapter import is_adapter_update
from legorl.serving.embedded.batch import Work
from legorl.serving.embedded.checks import copy_weights
from legorl.serving.embedded.omp import release_idle_workers
from legorl.serving.embedded.sampler import sample_rows
from legorl.serving.embedded.sequence import Sequence
from legorl.serving.types import (
    ContextLengthError,
    EngineClosedError,
    EngineError,
    FinishReason,
    InvalidRequestError,
    TokenOutput,
)

log = logging.getLogger(__name__)


class EngineThread:
    """The engine-thread half of `EmbeddedEngine`: its loop and what a step does. The state it works on (model,
    runner, pool, scheduler, adapters, command channel, counters, barriers) is set up by `EmbeddedEngine.__init__`."""

    def _root(self, adapter: str | None = None) -> bytes:
        """Prefix-cache root of rows on `adapter`: blocks computed under other weights never match."""
        ad = self._adapters.resolve(adapter)
        return self._version.to_bytes(8, "little", signed=True) + (ad.key if ad is not None else b"")

    def _root_of(self, seq: Sequence) -> bytes:
        return self._root(seq.request.adapter)

    def _adapter_of(self, seq: Sequence):
        return self._adapters.resolve(seq.request.adapter)

    def _version_of(self, seq: Sequence) -> int:
        name = seq.request.adapter
        return self._version if name is None else self._adapters.adapters[name].version

    @staticmethod
    def _affects(cmd: tuple[Any, ...], seq: Sequence) -> bool:
        """A named adapter's load waits only for that adapter's requests; updates and pauses for all."""
        return cmd[0] != "adapter" or seq.request.adapter == cmd[1]

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        # (re)binding the intra-op pool from this thread measurably speeds up its forwards
        torch.set_num_threads(self.num_threads)
        busy = False
        while True:
            was_busy = busy
            try:
                if not self._drain():
                    self._reject_pending()
                    return
                busy = self._step()
            except Exception as exc:  # a bug must fail the affected requests, never hang them
                log.exception("engine step failed")
                self._fail_all(EngineError(f"engine step failed: {exc!r}"))
                busy = False
            if not busy:
                if was_busy and self.num_threads > 1:
                    release_idle_workers()  # an idle engine must not throttle other threads' teams
                self._channel.wait(0.05)

    def _drain(self) -> bool:
        while (cmd := self._channel.take()) is not None:
            kind, *args = cmd
            if kind == "submit":
                self._waiting.append(args[0])
            elif kind == "abort":
                self._channel.resolve(args[1], self._abort(args[0]))
            elif kind == "logprobs":
                ids, temp, adapter, target = args
                try:
                    self._channel.resolve(target, self.runner.full_logprobs(ids, temp, self._adapters.resolve(adapter)))
                except Exception as exc:
                    self._channel.resolve(target, exc)
            elif kind == "resume":
                try:
                    self.pool.restore_storage()  # after a sleep
                    self._paused = False
                    self._channel.resolve(args[0], None)
                except Exception as exc:  # out of memory: stay paused, the caller sees why
                    self._channel.resolve(args[0], exc)
            elif kind in ("update", "pause", "sleep", "adapter"):
                if args[-2] == "abort":
                    for seq in self._in_flight():
                        if self._affects(cmd, seq):
                            self._finish(seq, "abort")
                self._barriers.append(cmd)
            elif kind == "close":
                self._fail_all(EngineClosedError("engine closed"))
                self._channel.resolve(args[0], None)
                return False
        return True

    def _reject_pending(self) -> None:
        """Fail whatever was queued behind the close command (a call racing with close never hangs)."""
        exc = EngineClosedError("engine closed")
        while (cmd := self._channel.take()) is not None:
            kind, *args = cmd
            if kind == "submit":
                self._channel.resolve((args[0].loop, args[0].future), exc)
            elif args and isinstance(args[-1], tuple):
                self._channel.resolve(args[-1], exc)

    def _abort(self, request_id: str) -> TokenOutput | None:
        for seq in itertools.chain(self._running, self._waiting):
            if seq.id == request_id:
                return self._finish(seq, "abort")
        return None

    def _in_flight(self) -> list[Sequence]:
        """Requests that hold sampled tokens (running, or preempted and waiting to resume)."""
        return [*self._running, *(s for s in self._waiting if s.num_generated > 0)]

    def _step(self) -> bool:
        flying = self._in_flight()
        for i, cmd in enumerate(self._barriers):  # the first whose requests have all finished
            if any(self._affects(cmd, s) for s in flying):
                continue
            del self._barriers[i]
            # their KV would mix versions / they hold nothing yet
            self.scheduler.requeue_unstarted(lambda s, cmd=cmd: self._affects(cmd, s))
            kind, *args = cmd
            if kind in ("pause", "sleep"):
                try:
                    if kind == "sleep":  # nothing holds a block now: the pool's memory goes back until resume
                        self.pool.free_storage()  # raises before it changes anything: the engine goes on
                    self._paused = True
                    self._channel.resolve(args[-1], None)
                except Exception as exc:
                    self._channel.resolve(args[-1], exc)
                return True
            try:
                if kind == "update":
                    self._apply_weights(args[0], args[1])
                else:
                    self._adapters.load(args[0], args[1], args[2])
                self._channel.resolve(args[-1], None)
            except Exception as exc:
                self._channel.resolve(args[-1], exc)
            return True

        def hold(s: Sequence) -> bool:
            return self._paused or any(self._affects(c, s) for c in self._barriers)

        if self._barriers or self._paused:  # requests that have not sampled yet give their blocks back
            self.scheduler.requeue_unstarted(hold)
        work = self.scheduler.schedule(self._root_of, hold)
        if not work:
            stuck = self.scheduler.fits_nothing()
            if stuck is not None:  # cannot happen after _validate, but never hang
                self._finish_error(stuck, ContextLengthError("request does not fit the KV budget", len(stuck.tokens), 0))
            return bool(self._barriers)
        # a mixed step's time is shared out by tokens: decode rows are one token each
        n_dec = sum(1 for w in work if w.n == 1 and w.seq.num_generated > 0)
        total = sum(w.n for w in work)
        c = self._counters
        c["steps"] += 1
        c["mixed_steps"] += bool(n_dec and n_dec < len(work))
        c["max_prompts_per_step"] = max(c["max_prompts_per_step"], len(work) - n_dec)
        t0 = time.perf_counter()
        self._run(work)
        dt = time.perf_counter() - t0
        c["decode_s"] += dt * n_dec / total
        c["prefill_s"] += dt * (total - n_dec) / total
        return True

    def _run(self, work: list[Work]) -> None:
        try:
            inputs, logits, routing = self.runner.step(work, self._adapter_of)
        except Exception as exc:  # find the request at fault one by one; the others go on
            if len(work) > 1:
                for w in work:
                    if w.seq in self._running:
                        self._run([w])
                return
            log.exception("step of request %s failed", work[0].seq.id)
            self._finish_error(work[0].seq, EngineError(f"forward failed: {exc!r}"))
            return
        pool = self.pool
        t0 = 0
        sampling: list[Sequence] = []
        for w in inputs.work:
            if routing is not None:
                rows = routing[t0 : t0 + w.n]
                if pool.routing is not None:
                    pool.routing[pool.slots(w.seq.blocks, w.start, w.start + w.n)] = rows
                w.seq.add_routing(w.start, rows)
            t0 += w.n
            self.scheduler.computed(w)
            if w.samples:
                sampling.append(w.seq)
        if sampling:
            self._sample(sampling, logits)

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        try:
            toks, lps = sample_rows(logits, [s.request.sampling for s in seqs], [s.generator for s in seqs])
        except Exception:  # one row's failure is its own: sample the rows one by one
            if len(seqs) > 1:
                for i, s in enumerate(seqs):
                    self._sample([s], logits[i : i + 1])
                return
            log.exception("sampling for request %s failed", seqs[0].id)
            self._finish_error(seqs[0], InvalidRequestError("sampling failed for these parameters"))
            return
        now = time.perf_counter()
        for s, t, lp in zip(seqs, toks, lps, strict=True):
            if s.num_generated == 0:
                s.weight_version = self._version_of(s)
            s.tokens.append(t)
            s.logprobs.append(lp)
            if s.request.on_tokens is not None:  # before the finish below: FIFO on the caller's loop
                s.loop.call_soon_threadsafe(s.request.on_tokens, [t])
            s.t_first = s.t_first or now
            self._counters["generated"] += 1
            sp = s.request.sampling
            if t in sp.stop_token_ids or (t in self.eos_token_ids and not sp.ignore_eos):
                self._finish(s, "stop")
            elif s.num_generated >= sp.max_tokens or len(s.tokens) >= self.max_model_len:
                self._finish(s, "length")

    def _release(self, seq: Sequence) -> None:
        self.scheduler.remove(seq)
        seq.finished = True

    def _finish(self, seq: Sequence, reason: FinishReason) -> TokenOutput:
        self._release(seq)
        out = seq.output(reason)
        self._counters["finished"] += 1
        self._channel.resolve((seq.loop, seq.future), out)
        return out

    def _finish_error(self, seq: Sequence, exc: BaseException) -> None:
        self._release(seq)
        self._channel.resolve((seq.loop, seq.future), exc)

    def _fail_all(self, exc: BaseException) -> None:
        for seq in [*self._running, *self._waiting]:
            self._finish_error(seq, exc)
        for cmd in self._barriers:
            self._channel.resolve(cmd[-1], exc)
        self._barriers.clear()

    def _apply_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Validate every tensor first, then copy in place: a bad update changes nothing. An adapter update
        (LoRA tensors only) is merged into the base weights it targets (serving/embedded/lora.py)."""
        if is_adapter_update(state_dict):
            self._adapters.load(None, state_dict, version)
        else:
            self._adapters.unmerge()  # the copy below may write only some weights (one bucket)
            copy_weights(self.model, state_dict)
            self._adapters.forget()
        self.pool.clear_cache()
        self._version = int(version)
