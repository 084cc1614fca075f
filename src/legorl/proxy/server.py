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

from legorl.proxy import routes_anthropic, routes_openai
from legorl.proxy.capture import Capture
from legorl.proxy.config import ProxyConfig
from legorl.proxy.errors import Protocol, ProxyError, error_response
from legorl.proxy.parsers import get_parser
from legorl.proxy.record import SessionRecord
from legorl.proxy.render import ChatRenderer
from legorl.proxy.session import Session, new_session_id
from legorl.proxy.sse import EXTRA_HEADERS, T0
from legorl.serving.manager import ServerManager

log = logging.getLogger(__name__)
Handler = Callable[[Any, web.Request, Session], Awaitable[web.StreamResponse]]


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
        self.capture = Capture(manager, self.renderer, self.config)
        self.sessions: dict[str, Session] = {}
        self._runner: web.AppRunner | None = None
        self.host, self.port = self.config.host, self.config.port

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.add_routes(self._routes())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
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
    def open_session(self, metadata: dict[str, Any] | None = None) -> Session:
        sid = new_session_id()
        s = Session(sid, f"{self.url}/sess/{sid}", self.config.model_name, dict(metadata or {}))
        self.sessions[sid] = s
        return s

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
    async def read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > self.config.max_body_bytes:
            raise ProxyError(413, f"request body over {self.config.max_body_bytes} bytes")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise ProxyError(413, f"request body over {self.config.max_body_bytes} bytes") from exc

    def _wrap(self, protocol: Protocol, handler: Handler, bare: bool = False):
        async def route(request: web.Request) -> web.StreamResponse:
            request[T0] = time.perf_counter()
            session: Session | None = None
            temp = False
            try:
                if bare:
                    sid = request.headers.get("X-Session-ID")
                    session, temp = (self.get_session(sid), False) if sid else (self.open_session(), True)
                    if temp:
                        request[EXTRA_HEADERS] = {"X-Session-ID": session.id}
                else:
                    session = self.get_session(request.match_info["session_id"])
                return await handler(self, request, session)
            except ProxyError as exc:
                err = exc
            except ValidationError as exc:
                err = ProxyError(400, _validation_message(exc))
            except Exception as exc:  # never let one request take the server down
                # the route pattern, not the path: a session id is the session's only credential
                log.exception("proxy: unhandled error on %s", request.match_info.route.resource.canonical)
                err = ProxyError(500, f"internal proxy error: {type(exc).__name__}")
            finally:
                if temp and session is not None:
                    await self.close_session(session.id)
            if session is not None:
                session.counters.errors += 1
            return error_response(protocol, err)

        return route

    def _routes(self) -> list[web.AbstractRouteDef]:
        oa, an, ct = routes_openai.chat_completions, routes_anthropic.messages, routes_anthropic.count_tokens
        r = [
            web.post("/sess/{session_id}/v1/chat/completions", self._wrap("openai", oa)),
            web.post("/sess/{session_id}/v1/messages", self._wrap("anthropic", an)),
            web.post("/sess/{session_id}/v1/messages/count_tokens", self._wrap("anthropic", ct)),
            web.get("/v1/models", self._models),
            web.get("/sess/{session_id}/v1/models", self._models),
            web.get("/health", self._health),
        ]
        if self.config.bare_routes:
            r += [
                web.post("/v1/chat/completions", self._wrap("openai", oa, bare=True)),
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
        name = self.config.model_name
        entry = {"id": name, "object": "model", "created": 0, "owned_by": "legorl", "type": "model",
                 "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
        return web.json_response({"object": "list", "data": [entry], "has_more": False, "first_id": name,
                                  "last_id": name})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"status": "ok", "sessions": len(self.sessions), "weight_version": self.manager.weight_version}
        )

    async def _open(self, request: web.Request) -> web.Response:
        s = self.open_session()
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
