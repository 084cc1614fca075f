"""The trial runner: what the training loop and `legorl eval` call to run a batch of trials.

`WorkerRunner` runs them through an `AgentLoopWorker` in this process; the Ray runtime has its own
runner with the same protocol, so the loop cannot tell where trials run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from legorl.trial import TrialResult, TrialSpec
from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import EndpointProvider
from legorl.workers.worker import AgentLoopWorker

OnDone = Callable[[TrialResult], Awaitable[None] | None]


class TrialRunner(Protocol):
    async def run(self, specs: Sequence[TrialSpec], temperature: float,
                  on_done: OnDone | None = None) -> list[TrialResult]:
        """Run `specs` at `temperature`; results in input order, `on_done` as each one ends."""
        ...


class WorkerRunner:
    """Runs trials through an AgentLoopWorker against one endpoint provider (a proxy, a URL, none)."""

    def __init__(self, config: WorkerConfig, endpoints: EndpointProvider):
        self.config = config
        self.endpoints = endpoints

    async def run(self, specs: Sequence[TrialSpec], temperature: float,
                  on_done: OnDone | None = None) -> list[TrialResult]:
        limits = dataclasses.replace(self.config.limits, temperature=temperature)
        worker = AgentLoopWorker(dataclasses.replace(self.config, limits=limits), self.endpoints)
        return await worker.run_trials(specs, on_result=on_done)
