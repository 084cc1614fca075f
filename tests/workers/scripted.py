"""ReplayEngine: a test double of the serving `Engine` protocol."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Literal

from legorl.models.chat import encode_text
from legorl.serving.types import EngineStats, GenerateRequest, PrefixProbe, TokenOutput

HANG = "<<hang>>"  # a script entry that never answers (until the request is aborted)


class ReplayEngine:
    """TEST DOUBLE, not an inference engine: each session replays the same fixed replies, tokenized
    with the real tokenizer and closed with the end-of-turn token, with a constant logprob.

    Why it exists: a random tiny model cannot solve a task, so proving the whole path (tool-call text
    -> proxy parser -> scaffold -> sandbox -> verifier -> reward 1.0) needs a policy whose replies are
    known. Everything around it (proxy, accumulator, scaffold, sandbox, verifier) is the real code.
    """

    LOGPROB = -0.25

    def __init__(self, tokenizer, script: list[str], eos_id: int, weight_version: int = 3):
        self.tok, self.script, self.eos = tokenizer, list(script), eos_id
        self._version = weight_version
        self._turn: dict[str | None, int] = {}
        self._aborts: dict[str, asyncio.Event] = {}
        self.requests: list[GenerateRequest] = []

    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self.requests.append(request)
        i = self._turn.get(request.session_id, 0)
        self._turn[request.session_id] = i + 1
        text = self.script[i] if i < len(self.script) else "I have nothing more to do."
        if text == HANG:
            ev = self._aborts.setdefault(request.request_id, asyncio.Event())
            await ev.wait()
            return TokenOutput(request.request_id, len(request.prompt_ids), [], [], "abort", self._version)
        ids = [*encode_text(self.tok, text), self.eos]
        finish: Literal["stop", "length"] = "stop"
        if len(ids) > request.sampling.max_tokens:
            ids, finish = ids[: request.sampling.max_tokens], "length"
        return TokenOutput(request.request_id, len(request.prompt_ids), ids, [self.LOGPROB] * len(ids), finish,
                           self._version)

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0) -> list[float | None]:
        return [None] + [self.LOGPROB] * (len(token_ids) - 1)

    async def abort(self, request_id: str) -> TokenOutput | None:
        ev = self._aborts.pop(request_id, None)
        if ev is not None:
            ev.set()
        return None

    def kv_cache_usage(self) -> float:
        return 0.0

    def prefix_cache_probe(self, token_ids: list[int]) -> PrefixProbe:
        return PrefixProbe(0, len(token_ids))

    async def update_weights(self, state_dict: Mapping[str, object], version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None:
        self._version = version

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None:
        return None

    async def resume(self) -> None:
        return None

    def stats(self) -> EngineStats:
        return EngineStats(self._version, 0, 0, 0.0, 0, 0, 0, 0, 0, len(self.requests), False)

    async def close(self) -> None:
        for ev in self._aborts.values():
            ev.set()
