"""Token streaming for one proxy call: sampled ids in, safe text deltas out, forwarded as SSE at once.

`TextStream` decodes incrementally (a multi-byte character split across tokens waits for its last
byte) and holds back any text that may still turn out to be a stop string or the start of a tool call:
what it emits is always a prefix of the reply text the non-streamed call returns, and the rest is sent
from the finished `CallResult` (`rest`). Tool calls stream too where the parser's calls are JSON (`hermes`:
`CallStream`, proxy/toolstream.py); other parsers' calls are sent whole at the end of the call.

`run_stream` drives one call: the capture runs as a task, deltas are written as they come, and a
client that disconnects cancels the task, which aborts the generation in the engine (nothing is
committed to the session, as for any aborted call).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from aiohttp import web

from legorl.proxy.capture import CallResult
from legorl.proxy.errors import ProxyError
from legorl.proxy.messages import ChatRequest
from legorl.proxy.record import Counters
from legorl.proxy.render import ChatRenderer
from legorl.proxy.sse import open_stream
from legorl.proxy.toolstream import CallStream, StreamedCall, reconcile

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a quiet stream checks that its client is still connected
WINDOW = 6  # tokens of left context re-decoded with each new token (byte-level BPE needs a few)


class TextStream:
    """Incremental decode + hold-back. `markers`: strings whose first occurrence ends the streamed
    text (stop strings, tool-call openers); `hold_space`: keep trailing whitespace back (a tool-call
    parser strips the content around calls)."""

    def __init__(self, decode: Callable[[list[int]], str], skip_ids: Iterable[int] = (),
                 markers: Iterable[str] = (), hold_space: bool = False) -> None:
        self._decode = decode
        self._skip = set(skip_ids)
        self._markers = [m for m in markers if m]
        self._hold_space = hold_space
        self.ids: list[int] = []
        self.text = ""  # decoded text so far (complete characters only)
        self.sent = 0  # chars of `text` already emitted
        self.frozen = False  # a marker was found: nothing after it is streamed as text
        self.frozen_at = -1  # where, when the marker was a tool-call opener
        self.calls: CallStream | None = None  # streams the calls after a tool-call opener
        self._tool_markers: tuple[str, ...] = ()
        self.tokens = 0  # ids received (a test reads it)
        self.prompt_tokens = 0  # set by the capture once the prompt is planned
        self._prefix = 0
        self._read = 0
        self.wake = asyncio.Event()

    def __call__(self, ids: list[int]) -> None:
        """The engine's token sink (on the event loop)."""
        self.tokens += len(ids)
        self.ids.extend(t for t in ids if t not in self._skip)
        if len(self.ids) > self._read:
            prev = self._decode(self.ids[self._prefix : self._read])
            new = self._decode(self.ids[self._prefix :])
            if len(new) > len(prev) and not new.endswith("\ufffd") and new.startswith(prev):
                self.text += new[len(prev) :]
                self._prefix = max(0, len(self.ids) - WINDOW)  # left context for the next decode
                self._read = len(self.ids)
        self.wake.set()

    def take(self) -> str:
        """Text that is safe to emit now (may be empty)."""
        if self.frozen:
            return ""
        text, start = self.text, self.sent
        limit = len(text)
        hits = [(p, m) for m in self._markers if (p := text.find(m, start)) >= 0]
        if hits:
            (limit, marker), self.frozen = min(hits), True
            if marker in self._tool_markers and not any(p == limit and m not in self._tool_markers for p, m in hits):
                self.frozen_at = limit
        else:
            limit -= _partial_tail(text, self._markers, start)
        if self._hold_space:
            limit = start + len(text[start:limit].rstrip())
        if limit <= start:
            return ""
        self.sent = limit
        return text[start:limit]

    def call_events(self) -> list[tuple]:
        """Tool-call events (`CallStream.poll`) of the text after the tool-call opener, if any."""
        if self.calls is None or self.frozen_at < 0:
            return []
        return self.calls.poll(self.text[self.frozen_at :])

    def plan(self, result: CallResult) -> list[tuple]:
        """Per parsed call: (its streamed call or None, arguments left to send); streamed ids kept."""
        if self.calls is None or not self.calls.calls:
            return [(None, c.arguments_json()) for c in result.tool_calls]
        result.tool_calls[:], plan = reconcile(self.calls.calls, result.tool_calls)
        return plan

    def rest(self, content: str) -> str:
        """What is left to send once the call is done, so the deltas add up to `content`."""
        sent = self.text[: self.sent]
        if content.startswith(sent):
            return content[len(sent) :]
        if content.startswith(sent.lstrip()):  # the parser stripped leading space the stream already sent
            return content[len(sent.lstrip()) :]
        log.warning("streamed text is not a prefix of the reply (%d chars sent): the rest is dropped", len(sent))
        return ""


def _partial_tail(text: str, markers: list[str], start: int) -> int:
    """Length of the longest suffix of text[start:] that is a proper prefix of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text) - start), best, -1):
            if text.endswith(m[:k]):
                best = k
                break
    return best


class StreamProtocol(Protocol):
    """One API's SSE events for a streamed call."""

    def head(self, prompt_tokens: int) -> list[str]: ...

    def delta(self, text: str) -> list[str]: ...

    def call_start(self, call: StreamedCall) -> list[str]: ...

    def call_args(self, call: StreamedCall, delta: str) -> list[str]: ...

    def tail(self, result: CallResult, rest: str, plan: list[tuple]) -> list[str]: ...

    def error(self, err: ProxyError) -> list[str]: ...


def _disconnected(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def run_stream(request: web.Request, call: Coroutine[Any, Any, CallResult], text: TextStream,
                     proto: StreamProtocol, counters: Counters | None = None) -> tuple[CallResult | None, web.StreamResponse]:
    """Run `call`, writing deltas as `text` releases them. Headers go out with the first delta, so an
    error before any token is still an HTTP error (raised from here). Returns (None, response) when
    the client went away (the call was cancelled) or the call failed after the stream began. `counters`
    get the time to the first streamed event (`streamed_calls`, `first_event_ms`)."""
    t0 = time.monotonic()

    async def opened(engine_s: float | None = None) -> web.StreamResponse:
        resp = await open_stream(request) if engine_s is None else await open_stream(request, engine_s)
        if counters is not None:
            counters.streamed_calls += 1
            counters.first_event_ms += round((time.monotonic() - t0) * 1000)
        return resp

    task = asyncio.ensure_future(call)
    resp: web.StreamResponse | None = None
    try:
        while True:
            text.wake.clear()
            piece = text.take()
            out = proto.delta(piece) if piece else []
            for ev in text.call_events():
                out += proto.call_start(ev[1]) if ev[0] == "start" else proto.call_args(ev[1], ev[2])
            if out:
                if resp is None:
                    resp = await opened()
                    await resp.write("".join(proto.head(text.prompt_tokens)).encode())
                await resp.write("".join(out).encode())
            if task.done():
                break
            waker = asyncio.ensure_future(text.wake.wait())
            await asyncio.wait({task, waker}, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
            if _disconnected(request):
                raise ConnectionResetError("client disconnected")
        try:
            result = task.result()
        except Exception as exc:
            if resp is None:
                raise
            if not isinstance(exc, ProxyError):  # headers are out: the error can only be an event now
                log.exception("proxy: a streamed call failed")
            err = exc if isinstance(exc, ProxyError) else ProxyError(500, f"internal proxy error: {type(exc).__name__}")
            await resp.write("".join(proto.error(err)).encode())
            await resp.write_eof()
            return None, resp
        if resp is None:
            resp = await opened(result.engine_s)
            await resp.write("".join(proto.head(result.prompt_tokens)).encode())
        for ev in text.call_events():  # the last tokens' events
            tail = proto.call_start(ev[1]) if ev[0] == "start" else proto.call_args(ev[1], ev[2])
            await resp.write("".join(tail).encode())
        await resp.write("".join(proto.tail(result, text.rest(result.content), text.plan(result))).encode())
        await resp.write_eof()
        return result, resp
    except ConnectionResetError:  # the client closed the stream: stop its generation
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None, resp if resp is not None else web.Response(status=499, text="client closed the connection")
    finally:
        if not task.done():  # the handler itself was cancelled
            task.cancel()


def text_stream(renderer: ChatRenderer, req: ChatRequest) -> TextStream:
    """The stream for one call: it ends at the request's stop strings and, when tools are on, at the
    parser's call openers (a parser that declares none streams its text only at the end)."""
    markers = list(req.stop)
    tools_on = bool(req.tools) and req.tool_choice != "none"
    parser_markers = renderer.parser.stream_markers if tools_on else ()
    stream = TextStream(renderer.decode, () if req.ignore_eos else renderer.stop_ids,
                        [*markers, *(parser_markers or ())], hold_space=tools_on)
    stream.frozen = tools_on and parser_markers is None
    if tools_on and renderer.parser.streams_json_calls:
        stream.calls = CallStream({t.name for t in req.tools})
        stream._tool_markers = tuple(parser_markers or ())
    return stream
