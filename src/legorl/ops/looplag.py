"""Event-loop lag: how late the loop's timers fire. One loop serves the proxy, spawns sandboxes and runs
scaffolds and verifiers; anything that holds it (a blocking call, a thread that keeps the GIL) delays
every trial at once, and shows up here before it shows up as a slow step."""

from __future__ import annotations

import asyncio
import time


class LoopLagMonitor:
    """Sleeps `interval_s` in a task on the running loop and records how much later than asked it woke."""

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._lags: list[float] = []

    def start(self) -> LoopLagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="legorl-loop-lag")
        return self

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self._lags.append(max(0.0, time.perf_counter() - t0 - self.interval_s))

    def take(self) -> dict[str, float]:
        """Lag since the last `take`: mean, p99 and max in seconds, and the samples taken."""
        lags, self._lags = sorted(self._lags), []
        if not lags:
            return {}
        return {"mean_s": sum(lags) / len(lags), "p99_s": lags[min(len(lags) - 1, int(0.99 * len(lags)))],
                "max_s": lags[-1], "samples": float(len(lags))}

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
