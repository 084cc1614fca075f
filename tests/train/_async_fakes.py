"""Stand-ins for the runtime and the trainer around `_async_steps`, for tests that drive the async loop
with fake trials (no engine or model: those tests check scheduling, staleness and buffering)."""

from __future__ import annotations

import contextlib


class FakeTrainer:
    """The trainer's weight stream, with nothing in it."""

    def stream_weights(self, emit) -> int:
        emit({})
        return 0


class FakeRuntime:
    """The Runtime protocol around a fake trial runner (the loop's only view of engines and trials)."""

    engines: list = []

    def __init__(self, runner):
        self.runner = runner

    def syncing(self):
        return contextlib.nullcontext()

    def updating(self):
        return contextlib.nullcontext()

    async def engine_stats(self):
        return []

    async def revive(self):
        return 0

    async def serving_metrics(self):
        return {}

    async def partial_counters(self):
        return {}

    async def close(self):
        return None
