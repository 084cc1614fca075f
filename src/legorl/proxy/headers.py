"""Per-request defaults a harness can send as headers when its request bodies cannot carry them.

Codex sends neither `max_output_tokens` nor a temperature, and Qwen Code no temperature; their adapters
(or the in-sandbox relay) send the trial's limits as these headers, and the routes use them only where
the body names no value, so what the engine samples at is what the trainer recomputes at.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from legorl.proxy.errors import ProxyError

MAX_OUTPUT_HEADER = "X-Legorl-Max-Output-Tokens"
TEMPERATURE_HEADER = "X-Legorl-Temperature"


def header_number(request: web.Request, name: str, kind: type) -> Any:
    """The header's value (int >= 1 or float >= 0), None when absent; a 400 when malformed."""
    raw = request.headers.get(name)
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise ProxyError(400, f"header {name}: not a number: {raw[:40]!r}") from None
    if not value >= (1 if kind is int else 0) or value != value or value == float("inf"):
        raise ProxyError(400, f"header {name}: out of range: {raw[:40]!r}")
    return value
