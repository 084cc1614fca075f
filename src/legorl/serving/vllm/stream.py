"""Token streaming from a `vllm serve`: `/v1/completions` with `stream: true` and `return_token_ids`,
each SSE chunk's token ids handed to the request's sink as it arrives, folded back into the one
response body the non-streamed call returns (so the caller builds the same `TokenOutput`)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import aiohttp
import numpy as np

from legorl.serving.types import ContextLengthError, EngineError, InvalidRequestError, TokenOutput, TokenSink


class StreamHTTPError(Exception):
    """The server refused the streamed call before streaming (status, body text)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.text = status, text


async def stream_completion(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                            sink: TokenSink) -> dict[str, Any]:
    """POST a streamed completion; returns `{"choices": [{token_ids, logprobs: {token_logprobs},
    finish_reason}], "usage": ...}` as the non-streamed route would."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    tokens: list[int] = []
    logprobs: list[float | None] = []
    finish: str | None = None
    usage: dict[str, Any] | None = None
    async with session.post(url, json=body) as r:
        if r.status >= 400:
            raise StreamHTTPError(r.status, await r.text())
        async for raw in r.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                raise StreamHTTPError(500, payload.decode(errors="replace"))
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                ids = [int(t) for t in choice.get("token_ids") or []]
                logprobs += (choice.get("logprobs") or {}).get("token_logprobs") or []
                finish = choice.get("finish_reason") or finish
                if ids:
                    tokens += ids
                    sink(ids)
    choice = {"token_ids": tokens, "logprobs": {"token_logprobs": logprobs}, "finish_reason": finish}
    return {"choices": [choice], "usage": usage or {}}


def raise_for(path: str, status: int, text: str, max_model_len: int) -> None:
    """Raise the engine error a failed vLLM call means (context overflow, bad request, server error)."""
    message = error_message(text)
    if status == 400 and ("context length" in message or "maximum model length" in message):
        raise ContextLengthError(message, 0, max_model_len)
    if 400 <= status < 500:
        raise InvalidRequestError(f"vLLM refused {path}: {message}")
    raise EngineError(f"vLLM server error on {path} (HTTP {status}): {message}")


def error_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:500]
    return str(err)[:500]


def attach_routing(out: TokenOutput, encoded: str | None) -> None:
    """Rows over prompt + output positions (`num_tokens - 1`), split as `TokenOutput` documents.
    None when the server runs without --enable-return-routed-experts (a dense model, or R3 off)."""
    if encoded is None:
        return
    routing = np.load(io.BytesIO(base64.b64decode(encoded)), allow_pickle=False).astype(np.int32)
    split = out.prompt_len - 1
    out.prompt_routed_experts = routing[:split]
    out.routed_experts = routing[split:split + len(out.token_ids)]
