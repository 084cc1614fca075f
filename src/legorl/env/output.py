"""Capped capture of a process's output: an agent can print gigabytes, the trainer must not hold them."""

from __future__ import annotations

import asyncio

DEFAULT_OUTPUT_CAP = 1 << 20  # bytes kept per stream
_TAIL_FRACTION = 4  # a quarter of the cap keeps the end: errors usually come last


class CappedBuffer:
    """Keeps the head and the tail of a byte stream; counts what it drops in between."""

    def __init__(self, cap: int = DEFAULT_OUTPUT_CAP) -> None:
        self.cap = max(cap, 0)
        self.tail_cap = self.cap // _TAIL_FRACTION
        self.head_cap = self.cap - self.tail_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self._tail += data
            if len(self._tail) > self.tail_cap:
                del self._tail[: len(self._tail) - self.tail_cap]

    def discard(self) -> None:
        """Keeps nothing from now on (the stream of a command that returned, drained only to the end)."""
        self.head_cap = self.tail_cap = 0
        self._head.clear()
        self._tail.clear()

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    @property
    def dropped(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def getvalue(self) -> bytes:
        if not self.truncated:
            return bytes(self._head + self._tail)
        marker = f"\n[... legorl: {self.dropped} bytes of output truncated ...]\n".encode()
        return bytes(self._head) + marker + bytes(self._tail)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")


async def drain(stream: asyncio.StreamReader | None, buf: CappedBuffer, chunk: int = 1 << 16) -> None:
    """Reads a stream to EOF into `buf`, always draining so the writer never blocks on a full pipe."""
    if stream is None:
        return
    while True:
        data = await stream.read(chunk)
        if not data:
            return
        buf.write(data)


def tail(text: str, limit: int = 4000) -> str:
    """Last `limit` characters: what a report about a failure needs."""
    return text if len(text) <= limit else "..." + text[-limit:]
