"""Proxy settings (all optional; the defaults suit an in-process run). The limits are also the run
config's `[serving.proxy]` section (`ProxyConfig.from_section`); docs/limits.md explains them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ProxyConfig:
    host: str = "127.0.0.1"
    public_host: str | None = None  # host in session URLs; None: `host`, or this node's IP when binding 0.0.0.0
    port: int = 0  # 0: an ephemeral port
    tool_parser: str = "hermes"
    model_name: str = "legorl-policy"  # what /v1/models reports
    recompute_on_rewrite: bool = True  # score rewritten history with prompt_logprobs
    capture_routing: bool = True  # ask for MoE routed experts (dense models return none)
    max_body_bytes: int = 32 * 1024 * 1024
    large_body_bytes: int = 256 * 1024  # bodies above this: parsed/tokenized on a worker thread, a few at a time
    max_concurrent_large_bodies: int = 2
    default_max_tokens: int = 1024  # calls without max_tokens: min(this, room left in window)
    clamp_max_tokens: bool = False  # cap max_tokens at the room left instead of a context-length 400
    trajectories_dir: Path | None = None  # write <dir>/<session_id>/proxy_trajectory.json on close
    management_routes: bool = False  # POST /sessions, DELETE /sessions/{id} (`legorl serve`)
    bare_routes: bool = False  # /v1/chat/completions, /v1/messages keyed by X-Session-ID (`legorl serve`)
    session_idle_ttl_sec: float | None = 3600.0  # HTTP-opened sessions idle this long are closed; None: never
    max_sessions: int = 4096  # open sessions beyond which POST /sessions (and bare calls) get a 429
    max_stored_responses: int = 256  # Responses API: ids kept per session for previous_response_id (oldest go)

    @classmethod
    def from_section(cls, section: Any, **kw: Any) -> ProxyConfig:
        """Limits from a `[serving.proxy]` section (`legorl.config.serving.ProxySection`), the rest from `kw`."""
        limits = {k: getattr(section, k) for k in LIMIT_FIELDS}
        return cls(**{**limits, **kw})


LIMIT_FIELDS = ("max_body_bytes", "large_body_bytes", "max_concurrent_large_bodies", "default_max_tokens",
                "session_idle_ttl_sec", "max_sessions")
