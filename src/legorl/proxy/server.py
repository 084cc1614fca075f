"""The in-process proxy server: aiohttp on 127.0.0.1, one URL prefix per session.

    proxy = ProxyServer(manager, tokenizer, ProxyConfig())
    await proxy.start()
    s = proxy.open_session()            # s.openai_base_url, s.anthropic_base_url
    ...                                  # the scaffold talks to those URLs
    record = await proxy.close_session(s.id, out_dir=trial_dir)   # SessionRecord (+ proxy_trajectory.json)
    await proxy.close()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from legorl.proxy import routes_anthropic, routes_openai, routes_responses
from legorl.proxy.capture import Capture
from legorl.proxy.config import ProxyConfig
from legorl.proxy.errors import Protocol, ProxyError, error_response
from legorl.proxy.intake import Intake
from legorl.proxy.models import ModelNames
from legorl.proxy.parsers import get_parser
from legorl.proxy.record import SessionRecord
from legorl.proxy.render import ChatRenderer
from legorl.proxy.session import Session, new_session_id
from legorl.proxy.sse import EXTRA_HEADERS, T0
from legorl.serving.manager import ServerManager

log = logging.getLogger(__name__)
Handler = Callable[[Any, web.Request, Session], Awaitable[web.StreamResponse]]


def _reachable_host(bind_host: str) -> str:
    """What a client on another node dials for a server bound to `bind_host` (a wildcard: this node's IP)."""
    if bind_host not in ("0.0.0.0", "::", ""):
        return bind_host
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outward interface
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors(include_url=False, include_input=False)[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
    return "invalid request: " + "; ".join(parts)


class ProxyServer:
    def __init__(self, manager: ServerManager, tokenizer: Any, config: ProxyConfig | None = None):
        """`tokenizer`: an HF tokenizer, or a model directory to load it from."""
        if isinstance(tokenizer, str | Path):
            from legorl.models.chat import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.config = config or ProxyConfig()
        self.manager = manager
        self.renderer = ChatRenderer(tokenizer, get_parser(self.config.tool_parser))
        self.models = ModelNames(self.config.model_name)  # `legorl serve` plugs in the engine's adapters
        self.capture = Capture(manager, self.renderer, self.config, self.models)
        self.intake = Intake(self.config)
        self.sessions: dict[str, Session] = {}
        self.bare_responses = routes_responses.ResponseStore(self.config.max_stored_responses)  # one-request sessions
        self.extra_routes: list[web.AbstractRouteDef] = []  # set before start (`legorl serve --engine-api`)
        self._runner: web.AppRunner | None = None
        self._reaper: asyncio.Task | None = None
        self.host, self.port = self.config.host, self.config.port
        self.public_host = self.config.public_host or _reachable_host(self.host)

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = f"[{self.public_host}]" if ":" in self.public_host else self.public_host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.add_routes(self._routes() + self.extra_routes)
        # bodies are decoded by `Intake` (bounded, errors as 400s), not inside aiohttp's parser
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        if self.config.session_idle_ttl_sec is not None:
            self._reaper = asyncio.create_task(self._reap(self.config.session_idle_ttl_sec), name="legorl-proxy-reaper")

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        for sid in list(self.sessions):
            if sid not in self.sessions:  # its trial closed it while an earlier close was awaited
                continue
            try:
                await self.close_session(sid)
            except KeyError:
                pass
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- sessions -----------------------------------------------------------------------------
    def open_session(self, metadata: dict[str, Any] | None = None, expires: bool = False) -> Session:
        """In-process callers (trial workers) are never refused nor expired; see `_open_http`."""
        sid = new_session_id()
        s = Session(sid, f"{self.url}/sess/{sid}", self.config.model_name, dict(metadata or {}), expires=expires)
        pinned = s.metadata.get("temperature")  # a trial's temperature (the worker's agent.pin_temperature)
        if isinstance(pinned, int | float) and not isinstance(pinned, bool) and pinned >= 0:
            s.temperature = float(pinned)
        self.sessions[sid] = s
        return s

    async def _open_http(self) -> Session:
        """A session for an HTTP client: idle ones expire, and at most `max_sessions` are open."""
        cap = self.config.max_sessions
        if len(self.sessions) >= cap:
            await self.expire_idle()
        if len(self.sessions) >= cap:
            ttl = self.config.session_idle_ttl_sec
            after = f"idle sessions close after {ttl:g} s" if ttl is not None else "sessions do not expire"
            raise ProxyError(429, f"too many open sessions ({len(self.sessions)}, the proxy's max_sessions): close "
                                  f"finished ones with DELETE /sessions/{{id}} ({after})", code="too_many_sessions")
        return self.open_session(expires=True)

    async def expire_idle(self) -> int:
        """Close HTTP-opened sessions idle for longer than the TTL (their trajectories are written)."""
        ttl, now = self.config.session_idle_ttl_sec, time.monotonic()
        if ttl is None:
            return 0
        stale = [sid for sid, s in self.sessions.items() if s.expires and s.idle_for(now) > ttl]
        for sid in stale:
            if sid in self.sessions:
                log.info("proxy: session idle for over %g s: closing it", ttl)
                try:
                    await self.close_session(sid)
                except KeyError:
                    pass
        return len(stale)

    async def _reap(self, ttl: float) -> None:
        while True:
            await asyncio.sleep(min(max(ttl / 2, 0.05), 30.0))
            try:
                await self.expire_idle()
            except Exception:  # never let the reaper die: sessions would stop expiring
                log.exception("proxy: expiring idle sessions failed")

    def get_session(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None or s.closed:
            raise ProxyError(404, "unknown or closed session")
        return s

    async def close_session(self, session_id: str, out_dir: str | Path | None = None) -> SessionRecord:
        """Close, abort its in-flight generations, return the record; write proxy_trajectory.json to
        `out_dir` (else `<trajectories_dir>/<session_id>/` when configured)."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            raise KeyError(session_id)
        s.closed = True
        for rid in list(s.inflight):
            await self.manager.abort(rid)
        self.manager.end_session(session_id)
        s.closed_at = time.time()
        record = s.record()
        target = out_dir or (self.config.trajectories_dir / session_id if self.config.trajectories_dir else None)
        if target is not None:  # off the event loop: a long session's JSON takes a while
            await asyncio.to_thread(record.write, target)
        return record

    # -- HTTP ---------------------------------------------------------------------------------
    def _wrap(self, protocol: Protocol, handler: Handler, bare: bool = False):
        async def route(request: web.Request) -> web.StreamResponse:
            request[T0] = time.perf_counter()
            session: Session | None = None
            temp = False
            try:
                if bare:
                    sid = request.headers.get("X-Session-ID")
                    session, temp = (self.get_session(sid), False) if sid else (await self._open_http(), True)
                    if temp:
                        session.one_request = True
                        request[EXTRA_HEADERS] = {"X-Session-ID": session.id}
                else:
                    session = self.get_session(request.match_info["session_id"])
                session.touch()
                return await handler(self, request, session)
            except ProxyError as exc:
                err = exc
            except ValidationError as exc:
                err = ProxyError(400, _validation_message(exc))
            except RecursionError:  # e.g. JSON nested deeper than a parser or the template goes
                err = ProxyError(400, "invalid request: nested too deeply")
            except Exception as exc:  # never let one request take the server down
                # the route pattern, not the path: a session id is the session's only credential
                log.exception("proxy: unhandled error on %s", request.match_info.route.resource.canonical)
                err = ProxyError(500, f"internal proxy error: {type(exc).__name__}")
            finally:
                if session is not None:
                    session.touch()
                if temp and session is not None and session.id in self.sessions:
                    await self.close_session(session.id)
            if session is not None:
                session.counters.errors += 1
            return error_response(protocol, err)

        return route

    def _routes(self) -> list[web.AbstractRouteDef]:
        oa, an, ct = routes_openai.chat_completions, routes_anthropic.messages, routes_anthropic.count_tokens
        rs = routes_responses.responses
        r = [
            web.post("/sess/{session_id}/v1/chat/completions", self._wrap("openai", oa)),
            web.post("/sess/{session_id}/v1/responses", self._wrap("openai", rs)),
            web.post("/sess/{session_id}/v1/messages", self._wrap("anthropic", an)),
            web.post("/sess/{session_id}/v1/messages/count_tokens", self._wrap("anthropic", ct)),
            web.get("/v1/models", self._models),
            web.get("/sess/{session_id}/v1/models", self._models),
            web.get("/health", self._health),
        ]
        if self.config.bare_routes:
            r += [
                web.post("/v1/chat/completions", self._wrap("openai", oa, bare=True)),
                web.post("/v1/responses", self._wrap("openai", rs, bare=True)),
                web.post("/v1/messages", self._wrap("anthropic", an, bare=True)),
                web.post("/v1/messages/count_tokens", self._wrap("anthropic", ct, bare=True)),
            ]
        if self.config.management_routes:
            r += [web.post("/sessions", self._open), web.delete("/sessions/{session_id}", self._close)]
        return r

    async def _models(self, request: web.Request) -> web.Response:
        """One list readable by both clients (OpenAI and Anthropic field names side by side)."""
        sid = request.match_info.get("session_id")
        if sid is not None and (sid not in self.sessions or self.sessions[sid].closed):
            return error_response("openai", ProxyError(404, "unknown or closed session"))
        names = self.models.names()
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "legorl", "type": "model",
                 "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return web.json_response({"object": "list", "data": data, "has_more": False, "first_id": names[0],
                                  "last_id": names[-1]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "sessions": len(self.sessions), "weight_version": self.manager.weight_version}
        )

    async def _open(self, request: web.Request) -> web.Response:
        try:
            s = await self._open_http()
        except ProxyError as exc:
            return error_response("openai", exc)
        return web.json_response(
            {"session_id": s.id, "openai_base_url": s.openai_base_url, "anthropic_base_url": s.anthropic_base_url}
        )

    async def _close(self, request: web.Request) -> web.Response:
        sid = request.match_info["session_id"]
        if sid not in self.sessions:
            return web.json_response({"error": {"message": "unknown or closed session"}}, status=404)
        record = await self.close_session(sid)
        path = self.config.trajectories_dir / sid / "proxy_trajectory.json" if self.config.trajectories_dir else None
        return web.json_response(
            {"session_id": sid, "trajectory": str(path) if path else None,
             "branches": len(record.branches), "policy_tokens": sum(record.mask)}
        )
