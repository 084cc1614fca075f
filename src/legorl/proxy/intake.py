"""Reading a request body without letting it hurt other requests.

- the size limit (413) applies to the body as the client sent it and as decoded;
- a body that cannot be decoded (a broken `Content-Encoding`, a cut connection) is a 400 with a message.
  The proxy decodes gzip/deflate itself (the server runs with aiohttp's `auto_decompress` off): a
  decoding error inside aiohttp's parser, once the handler runs, leaves `request.read()` waiting forever
  (aiohttp 3.14), and a bomb must stop at `max_body_bytes` of output;
- large bodies (over `large_body_bytes`, or compressed, whose decoded size is unknown up front) take a
  slot of a small semaphore before they are read, so only a few are in memory at once, and are parsed
  and tokenized on a worker thread (a `Lane`), so the event loop keeps serving everyone else. The slot
  is given back once the call is planned: generation itself is not serialized.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from legorl.proxy.config import ProxyConfig
from legorl.proxy.errors import ProxyError

T = TypeVar("T")


def _malloc_trim() -> None:
    """Hand the heap pages a large body's parse and tokenization freed back to the OS (glibc keeps
    them otherwise: RSS would stay at its high-water mark)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError):  # not glibc
    _LIBC = None


class Lane:
    """One request's way through parsing and planning: inline, or (large) on a worker thread, holding a
    large-body slot until `release`."""

    def __init__(self, slot: asyncio.Semaphore | None = None):
        self._slot = slot
        self.large = slot is not None

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.large:
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    def release(self) -> None:
        """Give the large-body slot back (idempotent); later work still runs on a thread."""
        if self._slot is not None:
            self._slot.release()
            self._slot = None
            asyncio.get_running_loop().run_in_executor(None, _malloc_trim)


INLINE = Lane()


class Intake:
    def __init__(self, config: ProxyConfig):
        self.max_body = config.max_body_bytes
        self.large_body = config.large_body_bytes
        self._slots = asyncio.Semaphore(max(1, config.max_concurrent_large_bodies))

    def _too_large(self) -> ProxyError:
        return ProxyError(413, f"request body over {self.max_body} bytes (the proxy's max_body_bytes)", close=True)

    @asynccontextmanager
    async def lane(self, request: web.Request) -> AsyncIterator[Lane]:
        n = request.content_length
        if n is not None and n > self.max_body:
            raise self._too_large()
        if n is not None and n <= self.large_body and not request.headers.get("Content-Encoding"):
            yield INLINE
            return
        await self._slots.acquire()
        lane = Lane(self._slots)
        try:
            yield lane
        finally:
            lane.release()

    async def read(self, request: web.Request, lane: Lane) -> bytes:
        """The decoded body (identity, gzip or deflate); decoding runs in the lane (a thread when large)."""
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise self._too_large() from exc
        except (RequestPayloadError, HttpProcessingError) as exc:
            raise ProxyError(400, f"could not read the request body: {type(exc).__name__}: {exc}", close=True) from exc
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("", "identity"):
            return body
        return await lane.offload(decode_body, body, encoding, self.max_body)


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip / deflate (zlib-wrapped or raw) with at most `limit` bytes of output."""
    if encoding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":  # RFC 9110 says zlib-wrapped; some clients send raw deflate
        wbits = zlib.MAX_WBITS if len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0 \
            else -zlib.MAX_WBITS
    else:
        raise ProxyError(415, f"unsupported Content-Encoding {encoding!r}: send identity, gzip or deflate")
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProxyError(400, f"could not decode the {encoding} request body: {exc}") from exc
    if len(out) > limit:
        raise ProxyError(413, f"request body over {limit} bytes once decoded (the proxy's max_body_bytes)")
    if not d.eof:
        raise ProxyError(400, f"the {encoding} request body is truncated")
    return out
