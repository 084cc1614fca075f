"""Weight sync: push the actor's weights to every replica and bump the weight version.

Atomic across replicas: all replicas are paused (in-flight requests finish, or abort for partial
rollout) before any is updated, and resumed only once all hold the new version, so no two requests
issued after the sync see different weights.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol


class WeightTarget(Protocol):
    """What a weight sync needs of a replica (an `Engine`, or a handle on a remote one)."""

    @property
    def weight_version(self) -> int: ...

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None: ...

    async def update_weights(self, state_dict: Mapping[str, Any], version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None: ...

    async def resume(self) -> None: ...


class WeightSync:
    def __init__(self, engines: Sequence[WeightTarget]):
        self.engines = list(engines)
        self.version = max((e.weight_version for e in self.engines), default=0)
        self.last_duration_s = 0.0

    async def push(
        self, state_dict: Mapping[str, Any], version: int | None = None, mode: Literal["wait", "abort"] = "wait"
    ) -> int:
        version = self.version + 1 if version is None else version
        t0 = time.perf_counter()
        await asyncio.gather(*(e.pause(mode) for e in self.engines))
        try:
            await asyncio.gather(*(e.update_weights(state_dict, version, mode) for e in self.engines))
        finally:
            await asyncio.gather(*(e.resume() for e in self.engines))
        self.version = version
        self.last_duration_s = time.perf_counter() - t0
        return version
