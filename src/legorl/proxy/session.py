"""A proxy session: one trial's conversations (branches), counters and in-flight calls."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from legorl.proxy.accumulator import Branch
from legorl.proxy.record import Counters, SessionRecord


@dataclass
class Session:
    id: str
    base_url: str  # http://host:port/sess/<id>
    model: str
    metadata: dict[str, Any] = field(default_factory=dict)
    branches: list[Branch] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    context_overflow: bool = False
    closed: bool = False
    opened_at: float = field(default_factory=time.time)
    closed_at: float = 0.0
    busy: dict[object, asyncio.Event] = field(default_factory=dict)  # branch (or new anchor) -> call done
    inflight: set[str] = field(default_factory=set)  # engine request ids
    expires: bool = False  # opened over HTTP (POST /sessions): closed after the idle TTL
    last_active: float = field(default_factory=time.monotonic)
    epoch: int = 0  # bumped by every commit: a plan made off the event loop against an older epoch is redone
    responses: Any = None  # Responses API: response id -> conversation (routes_responses.ResponseStore), lazily
    one_request: bool = False  # a bare call's temporary session (`legorl serve` without X-Session-ID)
    temperature: float | None = None  # pinned: every call samples at it, whatever the client sends (a trial's)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds since the last request ended or began; 0 while a call is in progress."""
        return 0.0 if self.busy or self.inflight else now - self.last_active

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def record(self) -> SessionRecord:
        return SessionRecord(
            session_id=self.id,
            model=self.model,
            branches=[b.to_record() for b in self.branches],
            counters=self.counters,
            context_overflow=self.context_overflow,
            opened_at=self.opened_at,
            closed_at=self.closed_at,
            metadata=dict(self.metadata),
        )


def new_session_id() -> str:
    """Unguessable: the session URL is the only credential a sandboxed scaffold holds."""
    return secrets.token_urlsafe(24)
