"""Server-sent events: the framing and the response that carries them. Streamed calls write each
protocol's exact event sequence as tokens are sampled (`legorl.proxy.streaming` drives that); text the
stream holds back (a possible tool call, a stop string) and tool calls go out at the end, in small
deltas (`chunks`)."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

CHUNK_CHARS = 24
T0 = web.RequestKey("legorl_t0", float)  # when the proxy started handling the request
EXTRA_HEADERS = web.RequestKey("legorl_headers", dict)  # e.g. X-Session-ID of a one-request session


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def event(data: dict[str, Any] | str, name: str | None = None) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n" if name else f"data: {payload}\n\n"


def server_timing(request: web.Request, engine_s: float) -> dict[str, str]:
    """`Server-Timing`: time spent in the proxy itself vs waiting on the engine (for benchmarks/debugging)."""
    total = time.perf_counter() - request.get(T0, time.perf_counter())
    timing = f"proxy;dur={(total - engine_s) * 1e3:.3f}, engine;dur={engine_s * 1e3:.3f}"
    return {"Server-Timing": timing, **request.get(EXTRA_HEADERS, {})}


def json_response(request: web.Request, payload: dict[str, Any], engine_s: float) -> web.Response:
    return web.Response(text=json.dumps(payload, ensure_ascii=False), content_type="application/json",
                        headers=server_timing(request, engine_s))


async def open_stream(request: web.Request, engine_s: float = 0.0) -> web.StreamResponse:
    """Send the headers of an event stream (`Server-Timing` counts what the proxy spent until then)."""
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                 **server_timing(request, engine_s)}
    )
    await resp.prepare(request)
    return resp
