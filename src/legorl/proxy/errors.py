"""Errors the proxy returns, rendered in each protocol's own error shape.

Handlers raise `ProxyError`; the protocol's route wraps it (OpenAI: `{"error": {...}}`, Anthropic:
`{"type": "error", "error": {...}}`), so a client library raises its usual exception class.
"""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web

Protocol = Literal["openai", "anthropic"]

# HTTP status -> Anthropic error type (https://docs.anthropic.com/en/api/errors)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


class ProxyError(Exception):
    """A request the proxy refuses; `code` is OpenAI's machine-readable code (e.g. context_length_exceeded)."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 close: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.close = close  # the connection cannot be reused (e.g. a body that could not be read to its end)


class ContextOverflow(ProxyError):
    def __init__(self, message: str, prompt_tokens: int, limit: int):
        super().__init__(400, message, code="context_length_exceeded", param="messages")
        self.prompt_tokens = prompt_tokens
        self.limit = limit


def error_body(protocol: Protocol, err: ProxyError) -> dict[str, Any]:
    if protocol == "anthropic":
        etype = _ANTHROPIC_TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
        return {"type": "error", "error": {"type": etype, "message": err.message}}
    etype = "invalid_request_error" if err.status < 500 else "server_error"
    if err.status == 404:
        etype = "not_found_error"
    return {"error": {"message": err.message, "type": etype, "param": err.param, "code": err.code}}


def error_response(protocol: Protocol, err: ProxyError) -> web.Response:
    resp = web.json_response(error_body(protocol, err), status=err.status)
    if err.close:
        resp.force_close()
    return resp
