"""`POST .../v1/messages` (+ `/count_tokens`): Anthropic Messages (JSON or its SSE event sequence)."""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from legorl.proxy.capture import CallResult
from legorl.proxy.errors import ProxyError, error_body
from legorl.proxy.messages import ChatRequest
from legorl.proxy.schemas_anthropic import CountTokensRequest, MessagesRequest, count_request, to_chat_request
from legorl.proxy.sse import chunks, event, json_response
from legorl.proxy.streaming import run_stream, text_stream
from legorl.proxy.toolstream import StreamedCall

_STOP = {"stop": "end_turn", "stop_sequence": "stop_sequence", "length": "max_tokens", "tool_calls": "tool_use"}


def _usage(r: CallResult, output_tokens: int | None = None) -> dict[str, Any]:
    return {
        "input_tokens": r.prompt_tokens,
        "output_tokens": r.completion_tokens if output_tokens is None else output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": r.cached_tokens,
    }


def _blocks(r: CallResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": r.content}] if r.content else []
    for c in r.tool_calls:
        args = c.arguments if isinstance(c.arguments, dict) else {"arguments": c.arguments}
        blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": args})
    return blocks


def message_body(r: CallResult, model: str, msg_id: str) -> dict[str, Any]:
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(r),
        "stop_reason": _STOP[r.finish],
        "stop_sequence": r.stop_sequence,
        "usage": _usage(r),
    }


class MessageStream:
    """Anthropic's event sequence: message_start, ping, a text block whose deltas go out as sampled,
    tool_use blocks whose `input_json_delta`s go out as sampled (whole at the end where the parser cannot
    stream them), text after the calls in a block of its own, message_delta (stop reason, usage), message_stop."""

    def __init__(self, model: str, msg_id: str) -> None:
        self.model, self.msg_id = model, msg_id
        self.index = 0  # the next block's index
        self.text_open = False
        self.tool_open = False  # a streamed tool_use block

    def head(self, prompt_tokens: int) -> list[str]:
        start = {"id": self.msg_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                 "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": prompt_tokens, "output_tokens": 1, "cache_creation_input_tokens": 0,
                           "cache_read_input_tokens": 0}}
        return [event({"type": "message_start", "message": start}, "message_start"), event({"type": "ping"}, "ping")]

    def _block(self, kind: str, body: dict[str, Any]) -> str:
        return event({"type": kind, "index": self.index, **body}, kind)

    def delta(self, text: str) -> list[str]:
        out = []
        if not self.text_open:
            self.text_open = True
            out.append(self._block("content_block_start", {"content_block": {"type": "text", "text": ""}}))
        out.append(self._block("content_block_delta", {"delta": {"type": "text_delta", "text": text}}))
        return out

    def _stop_open(self) -> list[str]:
        if not (self.text_open or self.tool_open):
            return []
        self.text_open = self.tool_open = False
        stop = self._block("content_block_stop", {})
        self.index += 1
        return [stop]

    def call_start(self, c: StreamedCall) -> list[str]:
        out = self._stop_open()  # the text before it, or the call before it (its arguments are complete)
        self.tool_open = True
        return [*out, self._block("content_block_start", {"content_block": {"type": "tool_use", "id": c.id,
                                                                             "name": c.name, "input": {}}})]

    def call_args(self, c: StreamedCall, delta: str) -> list[str]:
        return [self._block("content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": delta}})]

    def tail(self, r: CallResult, rest: str, plan: list[tuple]) -> list[str]:
        out = []
        streamed = [(s, args) for s, args in plan if s is not None]
        if self.tool_open and streamed:  # the last streamed call's block is still open
            out += [d for p in chunks(streamed[-1][1]) for d in self.call_args(streamed[-1][0], p)]
        if self.tool_open:
            out += self._stop_open()
        if rest:
            out += self.delta(rest)
        out += self._stop_open()
        done = {s.id for s, _ in streamed}
        for b in _blocks(r):
            if b["type"] != "tool_use" or b["id"] in done:
                continue
            out.append(self._block("content_block_start", {"content_block": {**b, "input": {}}}))
            out += [self._block("content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": p}})
                    for p in chunks(json.dumps(b["input"], ensure_ascii=False))]
            out.append(self._block("content_block_stop", {}))
            self.index += 1
        delta = {"stop_reason": _STOP[r.finish], "stop_sequence": r.stop_sequence}
        out.append(event({"type": "message_delta", "delta": delta, "usage": _usage(r)}, "message_delta"))
        out.append(event({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, err: ProxyError) -> list[str]:
        return [event(error_body("anthropic", err), "error")]


def _parse(body: bytes) -> tuple[MessagesRequest, ChatRequest]:
    req = MessagesRequest.model_validate_json(body)
    return req, to_chat_request(req)


async def messages(server, request: web.Request, session) -> web.StreamResponse:
    async with server.intake.lane(request) as lane:
        req, chat = await lane.offload(_parse, await server.intake.read(request, lane))
        model = req.model or server.config.model_name
        msg_id = "msg_" + secrets.token_hex(12)
        if req.stream:
            text = text_stream(server.renderer, chat)
            _, resp = await run_stream(request, server.capture.call(session, chat, lane, text), text,
                                       MessageStream(model, msg_id), session.counters)
            return resp
        result = await server.capture.call(session, chat, lane)
    payload = message_body(result, model, msg_id)
    return json_response(request, payload, result.engine_s)


async def count_tokens(server, request: web.Request, session) -> web.Response:
    """Token count of the rendered prompt (one-shot render; the session's branches are not touched)."""
    def count(body: bytes) -> int:
        msgs, tools = count_request(CountTokensRequest.model_validate_json(body))
        return len(server.renderer.encode(server.renderer.render(msgs, tools, add_generation_prompt=True)))

    async with server.intake.lane(request) as lane:
        n = await lane.offload(count, await server.intake.read(request, lane))
    return web.json_response({"input_tokens": n})
