"""The engine's plain HTTP calls to a `vllm serve`, and the prompt checks made before one is sent."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from legorl.serving.types import ContextLengthError, EngineError, InvalidRequestError
from legorl.serving.vllm.stream import raise_for


async def post_checked(session: aiohttp.ClientSession, base_url: str, path: str, body: dict[str, Any] | None,
                       max_model_len: int, plain: bool = False) -> dict[str, Any]:
    """POST `body` to `base_url + path`; any failure raised as the engine error it means. `plain`: the route
    answers text (returned as `{"text": ...}`)."""
    for attempt in (0, 1):
        try:
            async with session.post(base_url + path, json=body) as r:
                text = await r.text()
                status = r.status
            break
        except aiohttp.ServerDisconnectedError as e:
            # a pooled connection the server had just closed: control calls are safe to repeat
            if attempt or path.startswith("/v1/"):
                raise EngineError(f"vLLM server {base_url} failed on {path}: {e}") from e
        except aiohttp.ClientError as e:
            raise EngineError(f"vLLM server {base_url} failed on {path}: {e}") from e
    if status >= 400:
        raise_for(path, status, text, max_model_len)
    try:
        return {"text": text} if plain else json.loads(text) if text else {}
    except ValueError as e:
        raise EngineError(f"vLLM returned non-JSON on {path}: {text[:200]}") from e


def check_prompt(ids: list[int], vocab_size: int | None, max_model_len: int) -> None:
    """Refuse what vLLM would refuse (or, for an id past the vocabulary, crash on) before it is sent."""
    if not ids:
        raise InvalidRequestError("empty prompt: at least one token is required")
    bad = [t for t in ids if not isinstance(t, int) or t < 0 or (vocab_size and t >= vocab_size)]
    if bad:
        raise InvalidRequestError(f"token id {bad[0]!r} is outside the vocabulary [0, {vocab_size})")
    if len(ids) >= max_model_len:
        raise ContextLengthError(
            f"prompt of {len(ids)} tokens leaves no room in the model's context of {max_model_len}",
            len(ids), max_model_len)
