"""`POST .../v1/messages` (+ `/count_tokens`): Anthropic Messages (JSON or its SSE event sequence)."""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from legorl.proxy.capture import CallResult
from legorl.proxy.messages import ChatRequest
from legorl.proxy.schemas_anthropic import CountTokensRequest, MessagesRequest, count_request, to_chat_request
from legorl.proxy.sse import chunks, event, json_response, send_stream

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


def stream_events(r: CallResult, model: str, msg_id: str) -> list[str]:
    start = {**message_body(r, model, msg_id), "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": _usage(r, output_tokens=1)}
    out = [event({"type": "message_start", "message": start}, "message_start"), event({"type": "ping"}, "ping")]
    for i, b in enumerate(_blocks(r)):
        if b["type"] == "text":
            head, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in chunks(b["text"])]
        else:
            head = {**b, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p}
                      for p in chunks(json.dumps(b["input"], ensure_ascii=False))]
        out.append(event({"type": "content_block_start", "index": i, "content_block": head}, "content_block_start"))
        out += [event({"type": "content_block_delta", "index": i, "delta": d}, "content_block_delta") for d in deltas]
        out.append(event({"type": "content_block_stop", "index": i}, "content_block_stop"))
    delta = {"stop_reason": _STOP[r.finish], "stop_sequence": r.stop_sequence}
    out.append(event({"type": "message_delta", "delta": delta, "usage": {"output_tokens": r.completion_tokens}},
                     "message_delta"))
    out.append(event({"type": "message_stop"}, "message_stop"))
    return out


def _parse(body: bytes) -> tuple[MessagesRequest, ChatRequest]:
    req = MessagesRequest.model_validate_json(body)
    return req, to_chat_request(req)


async def messages(server, request: web.Request, session) -> web.StreamResponse:
    async with server.intake.lane(request) as lane:
        req, chat = await lane.offload(_parse, await server.intake.read(request, lane))
        result = await server.capture.call(session, chat, lane)
    model = req.model or server.config.model_name
    msg_id = "msg_" + secrets.token_hex(12)
    if req.stream:
        return await send_stream(request, stream_events(result, model, msg_id), result.engine_s)
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
