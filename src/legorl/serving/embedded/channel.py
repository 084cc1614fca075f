"""The bridge between asyncio callers and the engine thread: commands go in a queue that wakes the
thread, answers come back on each caller's own event loop (the engine serves several loops at once)."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

# where an answer goes: the caller's loop and the future it awaits
Target = tuple[asyncio.AbstractEventLoop, asyncio.Future]


class CommandChannel:
    def __init__(self) -> None:
        self._commands: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._wake = threading.Event()

    def submit(self, cmd: tuple[Any, ...]) -> None:
        self._commands.put(cmd)
        self._wake.set()

    async def call(self, kind: str, *args: Any) -> Any:
        """Send `(kind, *args, target)` and wait for the engine thread to resolve the target."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.submit((kind, *args, (loop, fut)))
        return await fut

    def take(self) -> tuple[Any, ...] | None:
        """The next command, or None when the queue is empty (engine thread)."""
        try:
            return self._commands.get_nowait()
        except queue.Empty:
            return None

    def wait(self, timeout: float) -> None:
        """Sleep until a command arrives or `timeout` passes (engine thread, when idle)."""
        self._wake.wait(timeout)
        self._wake.clear()

    @staticmethod
    def resolve(target: Target | None, value: Any) -> None:
        """Answer a caller from the engine thread: an exception fails its future, anything else is the result."""
        if target is None:
            return
        loop, fut = target

        def done() -> None:
            if not fut.done():
                (fut.set_exception if isinstance(value, BaseException) else fut.set_result)(value)

        loop.call_soon_threadsafe(done)
