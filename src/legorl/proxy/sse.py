"""Server-sent events. The engine returns whole outputs, so a stream is written once the call is
done: the exact event sequence each protocol defines, content split into small deltas."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

CHUNK_CHARS = 24


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def event(data: dict[str, Any] | str, name: str | None = None) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n" if name else f"data: {payload}\n\n"


async def send_stream(request: web.Request, events: list[str]) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await resp.prepare(request)
    await resp.write("".join(events).encode())
    await resp.write_eof()
    return resp
