"""Where a trial's scaffold reaches the policy: a proxy session (tokens captured) or a plain URL.

The worker only sees this small protocol, so it runs the same against the in-process proxy, a
remote OpenAI-compatible server (eval of any served model; nothing to train on) or no model at all
(oracle / nop scaffolds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from legorl.agents.base import SessionEndpoint
from legorl.proxy.record import SessionRecord


class EndpointProvider(Protocol):
    captures_tokens: bool

    async def open(self, metadata: dict[str, Any]) -> tuple[SessionEndpoint, str | None]:
        """A fresh endpoint for one trial and a handle to close it with (async: the proxy may be remote)."""
        ...

    async def close(self, handle: str | None, out_dir: Path | None) -> SessionRecord | None:
        """End the session; the record (None when nothing is captured). Must not raise on a dead session."""
        ...


class ProxyEndpoints:
    """One proxy session per trial; closing aborts its in-flight generations and returns the tokens."""

    captures_tokens = True

    def __init__(self, proxy: Any, model: str | None = None):
        self.proxy = proxy
        self.model = model or proxy.config.model_name

    async def open(self, metadata: dict[str, Any]) -> tuple[SessionEndpoint, str | None]:
        s = self.proxy.open_session(metadata)
        return SessionEndpoint(s.openai_base_url, s.anthropic_base_url, model=self.model), s.id

    async def close(self, handle: str | None, out_dir: Path | None) -> SessionRecord | None:
        if handle is None:
            return None
        try:
            return await self.proxy.close_session(handle, out_dir=out_dir)
        except KeyError:  # already closed (e.g. the proxy shut down first)
            return None


class DirectEndpoints:
    """Every trial talks straight to one OpenAI-compatible server: no token capture, eval only."""

    captures_tokens = False

    def __init__(self, base_url: str, model: str, api_key: str = "legorl"):
        base = base_url.rstrip("/")
        self.openai_base_url = base if base.endswith("/v1") else base + "/v1"
        self.anthropic_base_url = self.openai_base_url[: -len("/v1")]
        self.model, self.api_key = model, api_key

    async def open(self, metadata: dict[str, Any]) -> tuple[SessionEndpoint, str | None]:
        return SessionEndpoint(self.openai_base_url, self.anthropic_base_url, self.model, self.api_key), None

    async def close(self, handle: str | None, out_dir: Path | None) -> SessionRecord | None:
        return None


class NoEndpoints(DirectEndpoints):
    """For scaffolds that never call a model (oracle, nop): a URL that refuses connections."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/v1", "none")
