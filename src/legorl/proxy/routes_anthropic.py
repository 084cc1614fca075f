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
    tool_use blocks (whole) at the end, message_delta (stop reason, usage), message_stop."""

    def __init__(self, model: str, msg_id: str) -> None:
        self.model, self.msg_id = model, msg_id
        self.index = 0  # the next block's index
        self.text_open = False

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

    def tail(self, r: CallResult, rest: str) -> list[str]:
        out = []
        if rest:
            out += self.delta(rest)
        if self.text_open:
            out.append(self._block("content_block_stop", {}))
            self.index += 1
        for b in _blocks(r):
            if b["type"] != "tool_use":
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
                                       MessageStream(model, msg_id))
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
