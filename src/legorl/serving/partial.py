"""Partial rollout: generations cut by a weight sync are resumed under the new weights.

A weight sync in async mode pauses the engines with mode "abort", so the trainer never waits for a
long generation to finish on old weights. Each in-flight request comes back with finish_reason
"abort" and the tokens it had so far. `PartialRolloutManager` wraps the real `ServerManager` and,
when an abort happened during a sync it was told about, waits for the sync to end and continues the
same generation: prompt + tokens so far, the remaining `max_tokens`. The caller gets one ordinary
`TokenOutput`; `token_weight_versions` says which weights sampled each token, and each logprob is
the one its own weights gave, so the trainer's importance correction sees the true behaviour policy.

Aborts that did not come from a sync (a caller's `abort`, a scheduler preemption) are returned as
they are.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from legorl.serving.manager import ServerManager, adapter_kw
from legorl.serving.types import GenerateRequest, TokenOutput


def merge_segments(request: GenerateRequest, segments: list[TokenOutput]) -> TokenOutput:
    """One TokenOutput for a generation produced in several segments (per-token versions kept)."""
    first, last = segments[0], segments[-1]
    if len(segments) == 1:
        return dataclasses.replace(first, request_id=request.request_id)
    ids = [t for s in segments for t in s.token_ids]
    routed = None
    if all(s.routed_experts is not None for s in segments):
        routed = np.concatenate([s.routed_experts for s in segments if s.routed_experts is not None], axis=0)
    return TokenOutput(
        request_id=request.request_id,
        prompt_len=len(request.prompt_ids),
        token_ids=ids,
        logprobs=[lp for s in segments for lp in s.logprobs],
        finish_reason=last.finish_reason,
        weight_version=max(s.weight_version for s in segments),
        cached_prompt_tokens=first.cached_prompt_tokens,
        routed_experts=routed,
        prompt_routed_experts=first.prompt_routed_experts,
        queue_time_s=sum(s.queue_time_s for s in segments),
        prefill_time_s=sum(s.prefill_time_s for s in segments),
        decode_time_s=sum(s.decode_time_s for s in segments),
        token_weight_versions=[v for s in segments for v in s.versions()],
    )


class PartialRolloutManager:
    """A `ServerManager` that resumes generations aborted by a weight sync (see the module docstring).

    The weight sync must run inside `async with manager.syncing():` so aborts are known to be the
    sync's. Counters: `resumed` (segments started after a sync), `partial` (requests resumed at least
    once), `finished` (requests returned).
    """

    def __init__(self, inner: ServerManager):
        self.inner = inner
        self._idle = asyncio.Event()
        self._idle.set()
        self._epoch = 0  # bumped when a sync starts
        self._current: dict[str, str] = {}  # caller's request id -> the segment in flight
        self._cancelled: set[str] = set()
        self.resumed = 0
        self.partial = 0
        self.finished = 0

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    def __getattr__(self, name: str) -> Any:  # pool-specific extras (stats, replicas) pass through
        return getattr(self.inner, name)

    @asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        """Bracket a weight sync: aborts seen inside it are resumed once it ends."""
        self._epoch += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._idle.set()

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        rid, sp = request.request_id, request.sampling
        segments: list[TokenOutput] = []
        generated: list[int] = []
        try:
            while True:
                epoch = self._epoch
                remaining = sp.max_tokens - len(generated)
                k = len(segments)
                seg_sp = sp if k == 0 else dataclasses.replace(
                    sp, max_tokens=remaining, seed=None if sp.seed is None else sp.seed + len(generated))
                sub = GenerateRequest(
                    list(request.prompt_ids) + generated, seg_sp, request_id=rid if k == 0 else f"{rid}.r{k}",
                    session_id=request.session_id, return_routed_experts=request.return_routed_experts,
                    on_tokens=request.on_tokens,  # a resumed segment continues the same stream
                )
                self._current[rid] = sub.request_id
                out = await self.inner.generate(sub)
                segments.append(out)
                generated.extend(out.token_ids)
                if out.finish_reason != "abort" or rid in self._cancelled:
                    break
                if self._idle.is_set() and self._epoch == epoch:
                    break  # not a sync's abort: hand it back
                await self._idle.wait()
                if rid in self._cancelled:
                    break
                if sp.max_tokens - len(generated) < 1:
                    segments[-1] = dataclasses.replace(out, finish_reason="length")
                    break
                if len(request.prompt_ids) + len(generated) >= self.max_model_len:
                    segments[-1] = dataclasses.replace(out, finish_reason="length")
                    break
                self.resumed += 1
        finally:
            self._current.pop(rid, None)
            self._cancelled.discard(rid)
        self.finished += 1
        self.partial += len(segments) > 1
        return merge_segments(request, segments)

    async def prompt_logprobs(
        self, token_ids: list[int], session_id: str | None = None, temperature: float = 1.0,
        adapter: str | None = None,
    ) -> list[float | None]:
        return await self.inner.prompt_logprobs(token_ids, session_id, temperature, **adapter_kw(adapter))

    async def abort(self, request_id: str) -> TokenOutput | None:
        cur = self._current.get(request_id)
        if cur is None:
            return await self.inner.abort(request_id)
        self._cancelled.add(request_id)
        return await self.inner.abort(cur)

    def end_session(self, session_id: str) -> None:
        self.inner.end_session(session_id)
