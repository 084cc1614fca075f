"""Proxy settings (all optional; the defaults suit an in-process run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ProxyConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: an ephemeral port
    tool_parser: str = "hermes"
    model_name: str = "legorl-policy"  # what /v1/models reports
    recompute_on_rewrite: bool = True  # score rewritten history with prompt_logprobs
    capture_routing: bool = True  # ask for MoE routed experts (dense models return none)
    max_body_bytes: int = 32 * 1024 * 1024
    default_max_tokens: int = 4096  # OpenAI requests without max_tokens: min(this, room left in window)
    clamp_max_tokens: bool = False  # cap max_tokens at the room left instead of a context-length 400
    trajectories_dir: Path | None = None  # write <dir>/<session_id>/proxy_trajectory.json on close
    management_routes: bool = False  # POST /sessions, DELETE /sessions/{id} (`legorl serve`)
    bare_routes: bool = False  # /v1/chat/completions, /v1/messages keyed by X-Session-ID (`legorl serve`)
