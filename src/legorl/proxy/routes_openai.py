"""`POST .../v1/chat/completions`: OpenAI chat completions (JSON or SSE chunks + `data: [DONE]`)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from aiohttp import web

from legorl.proxy.capture import CallResult
from legorl.proxy.errors import ProxyError, error_body
from legorl.proxy.headers import TEMPERATURE_HEADER, header_number
from legorl.proxy.messages import ChatRequest
from legorl.proxy.schemas_openai import ChatCompletionRequest, to_chat_request
from legorl.proxy.sse import chunks, event, json_response
from legorl.proxy.streaming import run_stream, text_stream
from legorl.proxy.toolstream import StreamedCall

_FINISH = {"stop": "stop", "stop_sequence": "stop", "length": "length", "tool_calls": "tool_calls"}


def _usage(r: CallResult) -> dict[str, Any]:
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
    }


def _tool_calls(r: CallResult) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
        for c in r.tool_calls
    ]


def _logprobs(r: CallResult, decode) -> dict[str, Any]:
    content = []
    for tid, lp in zip(r.token_ids, r.logprobs, strict=False):
        tok = decode([tid])
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []})
    return {"content": content}


def completion_body(r: CallResult, model: str, want_logprobs: bool, decode) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": r.content or (None if r.tool_calls else "")}
    if r.tool_calls:
        message["tool_calls"] = _tool_calls(r)
    return {
        "id": "chatcmpl-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": _logprobs(r, decode) if want_logprobs else None,
                "finish_reason": _FINISH[r.finish],
            }
        ],
        "usage": _usage(r),
    }


class ChatStream:
    """`chat.completion.chunk` events: role first, content and tool-call argument deltas as sampled (calls
    that cannot stream whole at the end), the finish reason, usage when asked, then `[DONE]`."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.base = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk",
                     "created": int(time.time()), "model": model}
        self.include_usage = include_usage

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        body = {**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self.include_usage:
            body["usage"] = None
        return event(body)

    def head(self, prompt_tokens: int) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, text: str) -> list[str]:
        return [self._chunk({"content": text})]

    def call_start(self, c: StreamedCall) -> list[str]:
        head = {"index": c.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        return [self._chunk({"tool_calls": [head]})]

    def call_args(self, c: StreamedCall, delta: str) -> list[str]:
        return [self._chunk({"tool_calls": [{"index": c.index, "function": {"arguments": delta}}]})]

    def tail(self, r: CallResult, rest: str, plan: list[tuple]) -> list[str]:
        out = [self._chunk({"content": piece}) for piece in chunks(rest)]
        index = sum(1 for s, _ in plan if s is not None)  # calls sent whole come after the streamed ones
        for c, (streamed, args) in zip(r.tool_calls, plan, strict=True):
            if streamed is None:
                head = {"index": index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
                out.append(self._chunk({"tool_calls": [head]}))
                i, index = index, index + 1
            else:
                i = streamed.index
            out += [self._chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}) for p in chunks(args)]
        out.append(self._chunk({}, _FINISH[r.finish]))
        if self.include_usage:
            out.append(event({**self.base, "choices": [], "usage": _usage(r)}))
        out.append(event("[DONE]"))
        return out

    def error(self, err: ProxyError) -> list[str]:
        return [event(error_body("openai", err))]


def _parse(body: bytes, temperature: float | None) -> tuple[ChatCompletionRequest, ChatRequest]:
    req = ChatCompletionRequest.model_validate_json(body)
    if req.temperature is None and temperature is not None:  # the harness's default (Qwen Code sends none)
        req.temperature = temperature
    return req, to_chat_request(req)


async def chat_completions(server, request: web.Request, session) -> web.StreamResponse:
    temperature = header_number(request, TEMPERATURE_HEADER, float)
    async with server.intake.lane(request) as lane:
        req, chat = await lane.offload(_parse, await server.intake.read(request, lane), temperature)
        model = req.model or server.config.model_name
        if req.stream:
            include = bool(req.stream_options and req.stream_options.include_usage)
            text = text_stream(server.renderer, chat)
            _, resp = await run_stream(request, server.capture.call(session, chat, lane, text), text,
                                       ChatStream(model, include), session.counters)
            return resp
        result = await server.capture.call(session, chat, lane)
    payload = completion_body(result, model, bool(req.logprobs), server.renderer.decode)
    return json_response(request, payload, result.engine_s)
