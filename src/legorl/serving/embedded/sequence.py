"""Per-request state inside the embedded engine."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import torch

from legorl.serving.types import FinishReason, GenerateRequest, TokenOutput


@dataclass(eq=False)  # identity: the scheduler looks requests up in its lists
class Sequence:
    request: GenerateRequest
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    generator: torch.Generator
    order: int
    tokens: list[int] = field(default_factory=list)
    prompt_len: int = 0
    logprobs: list[float] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)  # hashes of this sequence's full blocks
    prompt_hashes: list[bytes] = field(default_factory=list)  # every full block's hash at admission
    root: bytes = b""  # prefix-cache root at admission: the weights (version, adapter) its KV was computed with
    num_computed: int = 0  # positions whose KV is in the pool
    cached_prompt_tokens: int | None = None
    routing: list[torch.Tensor] = field(default_factory=list)  # rows per computed position, in order
    routing_len: int = 0
    weight_version: int = 0
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float | None = None
    t_first: float | None = None
    finished: bool = False

    @property
    def id(self) -> str:
        return self.request.request_id

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    def add_routing(self, first_pos: int, rows: torch.Tensor | None) -> None:
        """Keep routing for positions not seen before (the first computation is the one that
        produced the sampled tokens; a recompute after preemption must not overwrite it)."""
        if rows is None:
            return
        skip = max(0, self.routing_len - first_pos)
        if skip < rows.shape[0]:
            self.routing.append(rows[skip:])
            self.routing_len += rows.shape[0] - skip

    def output(self, reason: FinishReason) -> TokenOutput:
        now = time.perf_counter()
        gen = self.tokens[self.prompt_len :]
        routed = prompt_routed = None
        if self.request.return_routed_experts and self.routing:
            allr = torch.cat(self.routing).numpy()
            # position p's routing produced token p+1: prompt rows 0..P-2, generated rows P-1..
            prompt_routed = allr[: self.prompt_len - 1]
            routed = allr[self.prompt_len - 1 : self.prompt_len - 1 + len(gen)]
        t_start = self.t_start or now
        return TokenOutput(
            request_id=self.id,
            prompt_len=self.prompt_len,
            token_ids=list(gen),
            logprobs=list(self.logprobs),
            finish_reason=reason,
            weight_version=self.weight_version,
            cached_prompt_tokens=self.cached_prompt_tokens or 0,
            routed_experts=routed,
            prompt_routed_experts=prompt_routed,
            queue_time_s=t_start - self.t_submit,
            prefill_time_s=(self.t_first or now) - t_start,
            decode_time_s=now - (self.t_first or now),
        )
