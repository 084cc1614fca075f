"""Building blocks of the session scheduler: its config, errors, lease and per-session records
(kept apart from the decision logic in `legorl.serving.scheduler`, which re-exports them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from legorl.serving.types import Engine, EngineError

MIN_POLL_SEC = 5.0  # production floor for wait_poll_sec (see SchedulerConfig.floored)

# (replica id, engine) the session would be routed to now; supplied by the pool manager
TargetFn = Callable[[str], tuple[str, Engine]]


@dataclass(frozen=True)
class SchedulerConfig:
    high_watermark: float = 0.85
    hit_threshold: float = 0.80
    wait_poll_sec: float = MIN_POLL_SEC
    idle_grace_sec: float = 60.0
    max_wait_sec: float | None = None  # None: wait until admitted; else admit as "max_wait" after it
    preempt_superseded: bool = True
    attempt_overlap: float = 0.9  # shared prefix / waiting prompt length that makes a call a retry
    # add the prompt tokens of admitted leases and of idle reservations to the KV-usage probe: guards
    # a wake-up herd (admitted work the engine has not started yet) and keeps the KV that reserved
    # sessions will need on their next turn from being handed to newcomers
    count_pending: bool = True
    max_sessions: int = 100_000  # bound on per-session state (idle sessions evicted LRU)

    def floored(self) -> SchedulerConfig:
        """The production form: polling no faster than every `MIN_POLL_SEC` (tests may go lower)."""
        return replace(self, wait_poll_sec=max(self.wait_poll_sec, MIN_POLL_SEC))


class AdmissionAborted(EngineError):
    """The waiting call was aborted before admission (request aborted or session finished)."""


class AttemptPreempted(AdmissionAborted):
    """A newer attempt of the same session superseded this waiting one."""


@dataclass
class SessionState:
    id: str
    active: int = 0
    reserved: bool = False
    grace_until: float | None = None
    attempts: dict[str, int] = field(default_factory=dict)
    claim: tuple[str, int] | None = None  # (replica id, tokens) held by an idle reservation
    num_preempted: int = 0
    waiting: int = 0


@dataclass
class Waiter:
    session_id: str
    key: str
    attempt: int
    request_id: str | None
    prompt: list[int] = field(default_factory=list)
    explicit: bool = False
    aborted: str | None = None


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Lease:
    """An admitted call. Release it exactly once (idempotent); `async with` does it for you."""

    def __init__(self, sched: Any, session_id: str, reason: str, replica_id: str | None,
                 tokens: int, waited_s: float):
        self._sched = sched
        self.session_id = session_id
        self.reason = reason
        self.replica_id = replica_id
        self.tokens = tokens
        self.waited_s = waited_s
        self.released = False

    def release(self, failed: bool = False) -> None:
        if not self.released:
            self.released = True
            self._sched._release(self, failed)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.release(failed=exc_type is not None)


