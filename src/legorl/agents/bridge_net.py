"""Host side of the sandbox network relay: a unix socket that reaches one proxy session, nothing else.

An agent CLI that runs *inside* the sandbox (Claude Code, OpenCode) has an empty network namespace.
`bridge_relay.py` (inside) turns 127.0.0.1:PORT into connections on this socket; `HostRelay` answers
them as a small HTTP reverse proxy that prefixes every path with the session's base URL. So the
agent's base URL is just `http://127.0.0.1:PORT`: it never learns the session id, and it can reach
neither other sessions, nor other proxy routes, nor any other host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import aiohttp
from aiohttp import web

_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "host", "content-length"}
RELAY_SCRIPT = Path(__file__).with_name("bridge_relay.py")


class HostRelay:
    """`async with HostRelay(session_base_url) as r:` then bind `r.dir` into the sandbox; the socket is
    `r.dir / "proxy.sock"` and the in-sandbox relay script `r.dir / "relay.py"`."""

    def __init__(self, target_base: str, max_body_bytes: int = 64 << 20, max_calls: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        """`max_calls`: model calls (POSTs) let through; later ones get a 400 naming the turn limit, for
        agents that have no turn limit of their own (Codex). `headers`: added to every forwarded request
        the agent did not set them on (the trial's sampling defaults, `legorl.proxy.headers`)."""
        self.target = target_base.rstrip("/")
        self.headers = dict(headers or {})
        self.max_body = max_body_bytes
        self.max_calls = max_calls
        self.requests = 0
        self.calls = 0
        self.refused = 0
        self.dir: Path = Path()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    @property
    def socket_path(self) -> Path:
        return self.dir / "proxy.sock"

    async def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="legorl-relay-"))
        os.chmod(self.dir, 0o755)  # the sandbox uid must reach the socket and read the script
        shutil.copyfile(RELAY_SCRIPT, self.dir / "relay.py")
        os.chmod(self.dir / "relay.py", 0o644)
        # No timeouts here: generation can take long; the trial's own timeout bounds the run.
        self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket_path)).start()
        os.chmod(self.socket_path, 0o666)  # connect() needs write permission on the socket

    async def close(self) -> None:
        # The client first: in-flight forwards fail at once instead of holding the shutdown open.
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.dir != Path():
            shutil.rmtree(self.dir, ignore_errors=True)

    async def __aenter__(self) -> HostRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        self.requests += 1
        raw = request.raw_path.split("?", 1)[0]
        if any(seg in ("..", ".") or "%2e" in seg.lower() for seg in raw.split("/")):
            # The client library would resolve "/sess/<id>/../x" to "/sess/x": out of the session.
            return web.json_response({"error": {"message": "legorl relay: path outside the session"}}, status=400)
        if request.method == "POST":
            self.calls += 1
            if self.max_calls is not None and self.calls > self.max_calls:
                self.refused += 1
                msg = f"legorl relay: the trial's turn limit ({self.max_calls} model calls) is reached"
                return web.json_response({"error": {"message": msg, "type": "invalid_request_error",
                                                    "code": "turn_limit"}}, status=400)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        for k, v in self.headers.items():
            if k not in request.headers:
                headers[k] = v
        body = await request.read()
        try:
            upstream = await self._client.request(
                request.method, self.target + request.path_qs, headers=headers, data=body or None,
                allow_redirects=False,
            )
        except aiohttp.ClientError as exc:
            return web.json_response({"error": {"message": f"legorl relay: proxy unreachable: {exc}"}}, status=502)
        async with upstream:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            try:  # the agent may hang up mid-stream (killed at its timeout): nothing left to deliver
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():  # SSE streams pass through as they come
                    await resp.write(chunk)
                await resp.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                pass
        return resp
