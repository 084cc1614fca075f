"""The engine API of `legorl serve --engine-api`: what a training run needs to use the server as its engine.

    GET  /engine/info                     model, context, vocab, adapters and their versions
    POST /engine/generate                 a GenerateRequest as JSON (token ids in) -> TokenOutput as JSON
    POST /engine/prompt_logprobs          {"token_ids", "temperature", "adapter"} -> {"logprobs"}
    POST /engine/abort                    {"request_id"} -> {"output": TokenOutput | null}
    PUT  /engine/adapters/{name}?version=N&mode=wait   body: the adapter (safetensors) -> loaded on every replica

Generations go through the server's manager (balancer, session scheduler): one fleet, the adapter being an
attribute of the request. Loading adapter X waits only for X's own requests (or aborts them with
`mode=abort`); other runs' generations go on. Anyone who reaches the port can load adapters: the server binds
127.0.0.1 unless told otherwise, and this API is off unless `--engine-api` is given.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from legorl.serving.manager import ServerManager
from legorl.serving.remote.wire import output_to_json, request_from_json, unpack_tensors
from legorl.serving.types import ContextLengthError, EngineClosedError, InvalidRequestError

log = logging.getLogger(__name__)


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": {"message": message, **extra}}, status=status)


class EngineAPI:
    def __init__(self, manager: ServerManager, engines: Sequence[Any], model_name: str, vocab_size: int):
        self.manager, self.engines = manager, list(engines)
        self.model_name, self.vocab_size = model_name, vocab_size
        self._loads = asyncio.Lock()  # one adapter load at a time: replicas never end up on different versions

    def routes(self) -> list[web.AbstractRouteDef]:
        return [web.get("/engine/info", self._wrap(self.info)),
                web.post("/engine/generate", self._wrap(self.generate)),
                web.post("/engine/prompt_logprobs", self._wrap(self.prompt_logprobs)),
                web.post("/engine/abort", self._wrap(self.abort)),
                web.put("/engine/adapters/{name}", self._wrap(self.load_adapter))]

    def adapters(self) -> dict[str, int]:
        return dict(self.engines[0].adapters()) if self.engines else {}

    @staticmethod
    def _wrap(handler):
        async def route(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except ContextLengthError as exc:
                return _error(400, str(exc), code="context_length_exceeded", prompt_tokens=exc.prompt_tokens,
                              limit=exc.limit)
            except (InvalidRequestError, ValueError, json.JSONDecodeError) as exc:
                return _error(400, str(exc))
            except EngineClosedError as exc:
                return _error(503, f"the engine is shut down: {exc}")
            except Exception as exc:
                log.exception("engine API: %s failed", request.path)
                return _error(500, f"engine API error: {exc!r}")

        return route

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({"model": self.model_name, "max_model_len": self.manager.max_model_len,
                                  "vocab_size": self.vocab_size, "weight_version": self.manager.weight_version,
                                  "adapters": self.adapters()})

    async def generate(self, request: web.Request) -> web.Response:
        req = request_from_json(await request.json())
        req.sampling.validate()
        try:
            out = await self.manager.generate(req)
        except asyncio.CancelledError:  # the client went away: nobody will read this generation
            await self.manager.abort(req.request_id)
            raise
        return web.json_response(output_to_json(out))

    async def prompt_logprobs(self, request: web.Request) -> web.Response:
        d = await request.json()
        lps = await self.manager.prompt_logprobs([int(t) for t in d["token_ids"]], d.get("session_id"),
                                                 float(d.get("temperature", 1.0)), d.get("adapter"))
        return web.json_response({"logprobs": lps})

    async def abort(self, request: web.Request) -> web.Response:
        out = await self.manager.abort(str((await request.json())["request_id"]))
        return web.json_response({"output": output_to_json(out) if out is not None else None})

    async def load_adapter(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            version = int(request.query["version"])
        except (KeyError, ValueError):
            return _error(400, "PUT /engine/adapters/{name} needs ?version=N (the weight version it is)")
        mode = request.query.get("mode", "wait")
        if mode not in ("wait", "abort"):
            return _error(400, "mode must be wait or abort")
        state = unpack_tensors(await request.read())
        async with self._loads:
            for e in self.engines:
                load = getattr(e, "load_adapter", None)
                if load is None:
                    return _error(400, f"replica {getattr(e, 'name', e)!r} cannot hold named adapters (embedded "
                                       "engines only)")
                await load(name, state, version, mode)
        log.info("engine API: adapter %r now at version %d", name, version)
        return web.json_response({"name": name, "version": version})
