"""One call through the proxy: plan tokens -> generate -> cut at stop strings -> parse -> commit.

Nothing is written to a branch before the engine answers, so a refused or failed call leaves the
session exactly as it was.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

from legorl.proxy.accumulator import Branch
from legorl.proxy.config import ProxyConfig
from legorl.proxy.errors import ContextOverflow, ProxyError
from legorl.proxy.intake import INLINE, Lane
from legorl.proxy.messages import ChatRequest, Message, ToolCall, validate_tool_results
from legorl.proxy.models import ModelNames
from legorl.proxy.parsers import ParseResult
from legorl.proxy.planner import Plan, PromptTooLong, plan_call
from legorl.proxy.render import ChatRenderer
from legorl.proxy.session import Session
from legorl.proxy.stopwatch import StopWatch
from legorl.serving.manager import ServerManager, adapter_kw
from legorl.serving.types import (
    ContextLengthError,
    EngineClosedError,
    EngineError,
    GenerateRequest,
    InvalidRequestError,
    SamplingParams,
    TokenOutput,
)

GREEDY_BELOW = 1e-5  # temperatures under this are sampled greedily (as vLLM does)
log = logging.getLogger(__name__)

Finish = Literal["stop", "length", "tool_calls", "stop_sequence"]


class StreamSink(Protocol):
    """Where a streamed call's tokens go as they are sampled (`legorl.proxy.streaming.TextStream`)."""

    prompt_tokens: int

    def __call__(self, ids: list[int]) -> None: ...


@dataclass
class CallResult:
    content: str
    tool_calls: list[ToolCall]
    finish: Finish
    stop_sequence: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    engine_s: float = 0.0  # wall time waiting on the manager


class Capture:
    def __init__(self, manager: ServerManager, renderer: ChatRenderer, config: ProxyConfig,
                 models: ModelNames | None = None):
        self.manager = manager
        self.renderer = renderer
        self.config = config
        self.models = models or ModelNames(config.model_name)

    async def call(self, session: Session, req: ChatRequest, lane: Lane = INLINE,
                   stream: StreamSink | None = None) -> CallResult:
        """`lane`: where planning (render + tokenize) runs; its large-body slot is released once planned.
        `stream`: fed the sampled ids as they come; what is committed is the same as without it."""
        session.counters.calls += 1
        self._validate(req)
        adapter = self.models.resolve(req.model)  # before planning: an unknown model changes nothing
        try:
            plan = await self._plan(session, req, lane)
        finally:
            lane.release()
        key = _busy_key(plan)
        session.busy[key] = asyncio.Event()
        try:
            return await self._run(session, req, plan, stream, adapter)
        finally:
            session.busy.pop(key).set()

    @staticmethod
    def _validate(req: ChatRequest) -> None:
        if not req.messages:
            raise ProxyError(400, "messages must not be empty", param="messages")
        if req.messages[-1].role == "assistant":
            raise ProxyError(400, "the last message is from the assistant: prefill is not supported")
        err = validate_tool_results(req.messages)
        if err:
            raise ProxyError(400, err, param="messages")

    async def _plan(self, session: Session, req: ChatRequest, lane: Lane) -> Plan:
        """Plan against the current branches; wait while the target branch (or, for a new branch, a
        first call with the same anchor) has a call in flight, so a client's timeout-retry lands as a
        retry of that branch instead of a duplicate. A plan made on a worker thread while another call
        committed (the session's epoch moved) is made again."""
        window = self.manager.max_model_len
        max_chars = int(window * self.renderer.max_token_chars * self.renderer.chars_margin)
        while True:
            epoch = session.epoch
            try:
                plan = await lane.offload(plan_call, self.renderer, list(session.branches), req.messages, req.tools,
                                          max_chars)
            except PromptTooLong as exc:
                session.context_overflow = True
                session.counters.context_overflows += 1
                raise ContextOverflow(f"prompt is too long: {exc.chars} characters cannot fit the model's context "
                                      f"window of {window} tokens", exc.chars // self.renderer.max_token_chars,
                                      window) from exc
            except RuntimeError:  # a commit changed a branch under the worker thread: plan again
                if lane.large and session.epoch != epoch:
                    continue
                raise
            if session.closed:
                raise ProxyError(404, "session closed")
            ev = session.busy.get(_busy_key(plan))
            if ev is not None:
                lane.release()  # never hold a large-body slot while another call generates
                await ev.wait()
                if session.closed:
                    raise ProxyError(404, "session closed")
                continue
            if session.epoch == epoch:
                return plan

    def _sampling(self, session: Session, req: ChatRequest, prompt_len: int) -> SamplingParams:
        window = self.manager.max_model_len
        room = window - prompt_len
        max_tokens = req.max_tokens if req.max_tokens is not None else min(self.config.default_max_tokens, room)
        if self.config.clamp_max_tokens and room >= 1:
            max_tokens = min(max_tokens, room)
        if max_tokens < 1 or prompt_len + max_tokens > window:
            session.context_overflow = True
            session.counters.context_overflows += 1
            raise ContextOverflow(
                f"prompt is too long: {prompt_len} tokens + max_tokens {max(max_tokens, 0)} > {window} maximum "
                f"(the model's context window)",
                prompt_len, window,
            )
        stops = [] if req.ignore_eos else list(self.renderer.stop_ids)
        temp = req.temperature
        if session.temperature is not None and temp != session.temperature:  # the run's, not the harness's
            session.counters.temperature_pinned += 1
            temp = session.temperature
        temp = temp if temp >= GREEDY_BELOW else 0.0  # logits / 1e-300 would be inf
        sp = SamplingParams(temp, req.top_p, req.top_k, max_tokens, stops, req.seed)
        try:
            sp.validate()
        except InvalidRequestError as exc:
            raise ProxyError(400, str(exc)) from exc
        return sp

    async def _run(self, session: Session, req: ChatRequest, plan: Plan, stream: StreamSink | None,
                   adapter: str | None = None) -> CallResult:
        if session.closed:
            raise ProxyError(404, "session closed")
        prompt = plan.prompt_ids
        sp = self._sampling(session, req, len(prompt))
        watch = StopWatch(self.renderer.decode, req.stop, stream) if req.stop else None
        greq = GenerateRequest(prompt, sp, session_id=session.id, return_routed_experts=self.config.capture_routing,
                               on_tokens=watch if watch is not None else stream, adapter=adapter)
        stopping: list[asyncio.Future] = []
        if watch is not None:  # a stop string ends the generation, not just the text (stopwatch.py)
            watch.on_hit = lambda: stopping.append(_quiet(self.manager.abort(greq.request_id)))
        if stream is not None:
            stream.prompt_tokens = len(prompt)
        recompute = plan.kind == "rewrite" and self.config.recompute_on_rewrite and bool(plan.new_ids)
        session.inflight.add(greq.request_id)
        t0 = time.perf_counter()
        try:
            if recompute:
                temp = sp.temperature if sp.temperature > 0 else 1.0
                out, lps = await asyncio.gather(
                    self.manager.generate(greq), self.manager.prompt_logprobs(prompt, session.id, temp, **adapter_kw(adapter))
                )
            else:
                out, lps = await self.manager.generate(greq), None
        except ContextLengthError as exc:
            session.context_overflow = True
            session.counters.context_overflows += 1
            raise ContextOverflow(f"prompt is too long: {exc}", exc.prompt_tokens, exc.limit) from exc
        except InvalidRequestError as exc:
            raise ProxyError(400, str(exc)) from exc
        except EngineClosedError as exc:
            raise ProxyError(503, f"the inference engine is shut down: {exc}") from exc
        except EngineError as exc:
            raise ProxyError(500, f"inference failed: {exc}") from exc
        except asyncio.CancelledError:  # a streaming client went away: its generation was aborted
            session.counters.aborted += 1
            raise
        finally:
            session.inflight.discard(greq.request_id)
        await asyncio.gather(*stopping)
        if session.closed or (out.finish_reason == "abort" and not (watch is not None and watch.hit)):
            session.counters.aborted += 1
            raise ProxyError(503 if not session.closed else 404, "the generation was aborted")
        engine_s = time.perf_counter() - t0
        result = self._commit(session, req, plan, out, lps)
        result.engine_s = engine_s
        return result

    def _precompute_base(self, b: Branch, messages: list[Message]) -> None:
        """Render the branch's conversation for its next extension after the response is on its way
        (a long conversation's render is the largest per-call cost)."""
        if b.messages is messages and b.base_text is None:
            try:
                b.base_text = self.renderer.render(messages, b.tools, add_generation_prompt=False)
            except ProxyError:
                b.base_text = None

    def _cut(self, req: ChatRequest, out: TokenOutput) -> tuple[list[int], str, int | None, str | None]:
        """(kept ids, reply text, stop token id the model ended with, stop string hit)."""
        ids = out.token_ids
        stop_id = ids[-1] if out.finish_reason == "stop" and ids and ids[-1] in self.renderer.stop_ids else None
        text_ids = ids[:-1] if stop_id is not None else ids
        text = self.renderer.decode(text_ids)
        hits = [(text.find(s), s) for s in req.stop if s and s in text]
        if not hits:
            return ids, text, stop_id, None
        pos, hit = min(hits)
        lo, hi = 1, len(text_ids)  # smallest prefix whose text contains the stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if hit in self.renderer.decode(text_ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return text_ids[:lo], text[:pos], None, hit

    def _commit(
        self, session: Session, req: ChatRequest, plan: Plan, out: TokenOutput, lps: list[float | None] | None
    ) -> CallResult:
        kept, text, stop_id, hit = self._cut(req, out)
        parsed = (
            self.renderer.parser.parse(text, req.tools) if req.tools and req.tool_choice != "none" else ParseResult(text)
        )
        for call in parsed.tool_calls:
            call.id = req.call_id_prefix + call.id.removeprefix("call_")
        c, b = session.counters, plan.branch
        session.epoch += 1
        if plan.kind == "new":
            b.index, b.kind = len(session.branches), ("main" if not session.branches else "sub")
            session.branches.append(b)
            c.new_branches += 1
        elif plan.kind == "rewrite":
            c.rewrites += 1
            c.retries += plan.retry
            c.dropped_tokens += b.truncate(plan.fork)
        else:
            c.extensions += 1
            c.template_drift += plan.drift
        c.boundary_mismatches += not plan.boundary_exact
        n = len(plan.new_ids)
        if lps is not None:
            b.recomputed.append((plan.fork, plan.fork + n))
            c.recomputed_tokens += n
            b.append(plan.new_ids, 0, list(lps[plan.fork : plan.fork + n]), self.manager.weight_version)
        else:
            b.append(plan.new_ids, 0, [None] * n, -1)
        b.add_routing(0, out.prompt_routed_experts)
        start = len(b.ids)
        if out.routed_experts is not None:
            b.add_routing(start - 1, out.routed_experts[: len(kept)])
        b.append(kept, 1, list(out.logprobs[: len(kept)]), out.weight_version)
        b.versions[len(b.versions) - len(kept):] = out.versions()[: len(kept)]  # partial rollout: per token
        b.checkpoints.update(plan.checkpoints)
        reply = Message("assistant", parsed.content, parsed.tool_calls)
        b.messages = [*plan.messages, reply]
        b.last_prompt_text = plan.prompt_text
        b.base_text = None
        asyncio.get_running_loop().call_soon(self._precompute_base, b, b.messages)
        b.reply_stop_id = stop_id
        b.calls += 1
        c.tool_calls += len(parsed.tool_calls)
        c.tool_parse_failures += parsed.failures
        c.prompt_tokens += plan.prompt_len
        c.completion_tokens += len(kept)
        c.cached_prompt_tokens += out.cached_prompt_tokens
        capped = out.finish_reason == "length" and stop_id is None and not hit  # cut at max_tokens
        c.length_capped += int(capped)
        finish: Finish = "tool_calls" if parsed.tool_calls else "stop_sequence" if hit else (
            "length" if capped else "stop"
        )
        return CallResult(
            parsed.content, parsed.tool_calls, finish, hit, plan.prompt_len, len(kept),
            out.cached_prompt_tokens, kept, list(out.logprobs[: len(kept)]),
        )


def _busy_key(plan: Plan) -> object:
    return ("new", plan.branch.anchor) if plan.kind == "new" else id(plan.branch)


def _quiet(coro) -> asyncio.Future:
    """A fire-and-forget engine call whose failure is logged, never raised into the call it serves."""

    async def run() -> None:
        try:
            await coro
        except Exception:  # the generation ends at max_tokens instead; the text is cut either way
            log.warning("proxy: aborting a generation at its stop string failed", exc_info=True)

    return asyncio.ensure_future(run())
