"""What the training loop and `legorl eval` need from a placement: the `Runtime` protocol.

In-process (`InProcessRuntime`: engines, manager and proxy in this process, also `legorl eval`'s
stack) and Ray (`legorl.cluster.runtime.RayRuntime`: every role as Ray actors) implement it; the loop sees nothing
else. The manager and the proxy stay inside a runtime: the loop reaches the policy only through
trials (`runner`) and weight pushes (`engines`, bracketed by `syncing()`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from legorl.serving.types import EngineStats
from legorl.serving.weight_sync import WeightTarget
from legorl.workers.runner import TrialRunner


class Runtime(Protocol):
    @property
    def engines(self) -> Sequence[WeightTarget]:
        """The replicas a weight sync updates (empty for a runtime that serves no local policy)."""
        ...

    @property
    def runner(self) -> TrialRunner:
        """Runs trials against this runtime's policy."""
        ...

    def syncing(self) -> AbstractAsyncContextManager[None]:
        """Bracket a weight sync: with partial rollout, generations it cuts resume after it."""
        ...

    def updating(self) -> AbstractAsyncContextManager[None]:
        """Bracket a synchronous update: with `serving.free_kv_during_update` the replicas give their KV pools'
        memory back for it and allocate them again after it."""
        ...

    async def partial_counters(self) -> dict[str, int]:
        """Partial-rollout counters (`resumed`, `partial`); empty when partial rollout is off."""
        ...

    async def revive(self) -> int:
        """Bring replicas that died and were restarted back into routing with the current weights (after a
        weight sync); returns how many rejoined. 0 where nothing restarts replicas (in-process)."""
        ...

    async def serving_metrics(self) -> dict[str, float]:
        """The serving side's counters now: replica health, failovers, balancer and scheduler (`pool/`,
        `manager/`, `balancer/`, `scheduler/`; with Ray also `cluster/`); empty with one plain replica."""
        ...

    async def engine_stats(self) -> list[EngineStats]:
        """Each replica's counters now (cumulative: the step's time budget takes differences)."""
        ...

    async def close(self) -> None: ...
