"""Typed interface between the serving layer and its callers (proxy, trainer, weight sync).

An `Engine` is one inference replica. Everything the rest of legorl needs from a replica is in this
protocol, so the embedded torch engine and the vLLM engine are interchangeable, in-process or behind
a Ray actor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np

FinishReason = Literal["stop", "length", "abort"]

# Streaming: called on the caller's event loop with each run of newly sampled token ids, in order and
# before `generate` returns. What it has been given is always a prefix of the final `token_ids`. An
# engine that cannot stream (one behind a process or Ray boundary) never calls it: the caller then
# takes every token from the final output. It must be cheap and must not raise.
TokenSink = Callable[[list[int]], None]


class CountingSink:
    """A sink that counts what it forwarded: a call whose tokens already went out must not be run
    again (another replica, a restarted server) or the stream would contradict itself."""

    def __init__(self, sink: TokenSink) -> None:
        self.sink, self.n = sink, 0
        self.sent: list[int] = []

    def __call__(self, ids: list[int]) -> None:
        self.n += len(ids)
        self.sent.extend(ids)
        self.sink(ids)

    def replay(self) -> TokenSink:
        """A sink for the same call run again with the same seed: the ids already forwarded are checked
        and swallowed, the rest forwarded; a re-run that samples other ids fails loudly (EngineError)."""
        seen, before = 0, self.n

        def sink(ids: list[int]) -> None:
            nonlocal seen
            head = ids[:max(0, before - seen)]
            if head != self.sent[seen:seen + len(head)]:
                raise EngineError(f"the re-run sampled other tokens than the {before} already streamed")
            seen += len(head)
            if len(ids) > len(head):
                self(ids[len(head):])

        return sink


class EngineError(Exception):
    """Base class for errors raised by an engine for a request it cannot serve."""


class InvalidRequestError(EngineError, ValueError):
    """The request itself is malformed (empty prompt, negative max_tokens, bad sampling values)."""


class ContextLengthError(InvalidRequestError):
    """The prompt does not fit the model's context window (or the engine's KV budget)."""

    def __init__(self, message: str, prompt_tokens: int, limit: int):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class EngineClosedError(EngineError, RuntimeError):
    """The engine was shut down; no more requests are accepted."""


# Bounds every engine applies to valid but extreme values (float32 turns top_p=1e-300 into 0 and
# T=1e308 into inf): below MIN_TOP_P the nucleus is the top token anyway; above MAX_TEMPERATURE the
# distribution is as uniform as it gets.
MIN_TOP_P = 1e-6
MAX_TEMPERATURE = 1e30


@dataclass
class SamplingParams:
    """Sampling knobs. `temperature == 0` means greedy; `top_k <= 0` and `top_p >= 1` disable them."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False  # keep generating past the model's EOS (benchmarks, fixed-length probes)

    def validate(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise InvalidRequestError(f"top_k must be >= 0 (0 disables it), got {self.top_k!r}")


@dataclass
class GenerateRequest:
    prompt_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str | None = None
    return_routed_experts: bool = False
    on_tokens: TokenSink | None = field(default=None, repr=False, compare=False)
    # a named LoRA adapter the engine holds (`legorl serve --adapter NAME=DIR`); None: the engine's policy
    # (the base, or the adapter a training run pushed with `update_weights`)
    adapter: str | None = None

    def __getstate__(self) -> dict[str, object]:
        """A sink is a closure on the caller's loop: it does not cross a process (that replica then
        streams at the end, from the final output)."""
        return {**self.__dict__, "on_tokens": None}


@dataclass
class TokenOutput:
    """What one generate call produced. All tokens were sampled under a single `weight_version`.

    `logprobs[i]` is log p(token_ids[i]) under the distribution the sampler drew from:
    log_softmax(logits / temperature) over the full vocabulary (raw logits when greedy), before
    top-k/top-p truncation, so a trainer recomputing log_softmax(logits / T) gets the same number.

    `routed_experts` (MoE only, when asked): int array [len(token_ids), num_layers, top_k], row i
    being the experts chosen at the position whose logits produced token i.
    `prompt_routed_experts`: [len(prompt) - 1, num_layers, top_k] for the prompt positions before
    the last one (the last prompt position's routing is row 0 of `routed_experts`).
    """

    request_id: str
    prompt_len: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    weight_version: int
    cached_prompt_tokens: int = 0
    routed_experts: np.ndarray | None = None
    prompt_routed_experts: np.ndarray | None = None
    queue_time_s: float = 0.0
    prefill_time_s: float = 0.0
    decode_time_s: float = 0.0
    # partial rollout: a generation resumed across a weight sync carries one version per token
    # (`weight_version` is then the newest); None means every token has `weight_version`
    token_weight_versions: list[int] | None = None

    def versions(self) -> list[int]:
        """The weight version each generated token was sampled under."""
        if self.token_weight_versions is not None:
            return list(self.token_weight_versions)
        return [self.weight_version] * len(self.token_ids)


@dataclass(frozen=True)
class PrefixProbe:
    hit_tokens: int
    prompt_tokens: int

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class EngineStats:
    weight_version: int
    running: int
    waiting: int
    kv_cache_usage: float
    kv_budget_tokens: int
    prefill_tokens_computed: int
    prefill_tokens_cached: int
    generated_tokens: int
    preemptions: int
    requests_finished: int
    paused: bool
    prefill_s: float = 0.0  # seconds spent computing prefills (embedded engine; 0 where unknown)
    decode_s: float = 0.0  # seconds spent in decode steps
    steps: int = 0  # forward steps taken (embedded engine; 0 where unknown): tokens sampled / steps = batch size
    kv_bytes: int = 0  # memory the KV pool holds now (embedded engine; 0 while asleep, and where unknown)


@runtime_checkable
class Engine(Protocol):
    """One inference replica. All coroutine methods are safe to call concurrently."""

    @property
    def weight_version(self) -> int: ...

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Sample a completion; feeds `request.on_tokens` (when set) as tokens are sampled."""
        ...

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0) -> list[float | None]:
        """log p(ids[i] | ids[:i]) for every position; index 0 is None (vLLM's convention)."""
        ...

    async def abort(self, request_id: str) -> TokenOutput | None:
        """Stop a request; returns its partial output (finish_reason 'abort'), None if unknown."""
        ...

    def kv_cache_usage(self) -> float: ...

    def prefix_cache_probe(self, token_ids: list[int]) -> PrefixProbe: ...

    async def update_weights(
        self, state_dict: Mapping[str, object], version: int, mode: Literal["wait", "abort"] = "wait"
    ) -> None: ...

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None: ...

    async def resume(self) -> None: ...

    def stats(self) -> EngineStats: ...

    async def close(self) -> None: ...
