"""`serving.engine = "remote"`: a training run's engine is a `legorl serve --engine-api` shared with other runs.

The run keeps its own proxy, trials and trainer; only generation happens on the server, always with the
run's own named adapter (a request never reaches the server without it), and each weight sync replaces that
adapter alone, tagged with the run's weight version. The server's base must be the run's `model.path`; the
fidelity gate (`trainer.max_logprob_abs_diff`) is what notices if it is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import aiohttp

from legorl.serving.adapter import is_adapter_update
from legorl.serving.remote.wire import output_from_json, pack_tensors, request_to_json
from legorl.serving.types import (
    ContextLengthError,
    EngineClosedError,
    EngineError,
    EngineStats,
    GenerateRequest,
    InvalidRequestError,
    PrefixProbe,
    TokenOutput,
)

Mode = Literal["wait", "abort"]


class RemoteEngine:
    """Implements `legorl.serving.types.Engine` over the engine API (serving/remote/api.py)."""

    accepts_weight_buckets = False  # one adapter per sync: the buckets arrive merged

    def __init__(self, url: str, adapter: str, info: dict[str, Any], session: aiohttp.ClientSession):
        self.url, self.adapter, self.name = url.rstrip("/"), adapter, f"remote:{adapter}"
        self.max_model_len = int(info["max_model_len"])
        self.vocab_size = int(info["vocab_size"])
        self._version = int(info["adapters"].get(adapter, 0))
        self._http = session
        self._open = asyncio.Event()
        self._open.set()
        self._closed = False
        self._counts = {"generated": 0, "finished": 0}

    @classmethod
    async def attach(cls, url: str, adapter: str, timeout_s: float = 600.0) -> RemoteEngine:
        if not adapter:
            raise ValueError("a remote engine needs an adapter name (serving.remote.adapter)")
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))
        try:
            async with session.get(f"{url.rstrip('/')}/engine/info") as resp:
                if resp.status == 404:
                    raise EngineError(f"{url} has no engine API: start it with `legorl serve --engine-api`")
                info = await resp.json()
        except aiohttp.ClientError as exc:
            await session.close()
            raise EngineError(f"cannot reach the server at {url} (serving.remote.url): {exc}") from exc
        except BaseException:
            await session.close()
            raise
        return cls(url, adapter, info, session)

    @property
    def weight_version(self) -> int:
        return self._version

    async def _post(self, path: str, payload: Any = None, data: bytes | None = None, method: str = "POST") -> Any:
        if self._closed:
            raise EngineClosedError("engine is closed")
        try:
            async with self._http.request(method, self.url + path, json=payload, data=data) as resp:
                body = await resp.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise EngineError(f"the server at {self.url} failed: {exc}") from exc
        if resp.status >= 400:
            err = (body or {}).get("error", {})
            msg = err.get("message", str(body))
            if err.get("code") == "context_length_exceeded":
                raise ContextLengthError(msg, int(err["prompt_tokens"]), int(err["limit"]))
            if resp.status == 503:
                raise EngineClosedError(msg)
            raise (InvalidRequestError if resp.status < 500 else EngineError)(msg)
        return body

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        await self._open.wait()
        req = dataclasses.replace(request, adapter=request.adapter or self.adapter, on_tokens=None)
        try:
            body = await self._post("/engine/generate", request_to_json(req))
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.abort(req.request_id))
            raise
        out = output_from_json(body)
        self._counts["generated"] += len(out.token_ids)
        self._counts["finished"] += 1
        return out

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0,
                              adapter: str | None = None) -> list[float | None]:
        body = await self._post("/engine/prompt_logprobs", {"token_ids": list(token_ids), "temperature": temperature,
                                                            "adapter": adapter or self.adapter})
        return body["logprobs"]

    async def abort(self, request_id: str) -> TokenOutput | None:
        body = await self._post("/engine/abort", {"request_id": request_id})
        return output_from_json(body["output"]) if body["output"] is not None else None

    async def update_weights(self, state_dict: Mapping[str, Any], version: int, mode: Mode = "wait") -> None:
        """Replace this run's adapter on the server (every replica there) as weight `version`."""
        if not is_adapter_update(state_dict):
            raise ValueError("a remote engine (serving.engine='remote') takes the run's LoRA adapter only, never "
                             "base weights: set model.lora.rank > 0")
        await self._post(f"/engine/adapters/{self.adapter}?version={int(version)}&mode={mode}",
                         data=pack_tensors(state_dict), method="PUT")
        self._version = int(version)

    async def pause(self, mode: Mode = "wait") -> None:
        """Holds this run's new generations until `resume` (the server's load waits for the ones in flight)."""
        self._open.clear()

    async def resume(self) -> None:
        self._open.set()

    def kv_cache_usage(self) -> float:
        return 0.0  # the server's KV is shared with other runs; its own balancer/scheduler manage it

    def prefix_cache_probe(self, token_ids: list[int]) -> PrefixProbe:
        return PrefixProbe(0, len(token_ids))

    def stats(self) -> EngineStats:
        return EngineStats(weight_version=self._version, running=0, waiting=0, kv_cache_usage=0.0,
                           kv_budget_tokens=0, prefill_tokens_computed=0, prefill_tokens_cached=0,
                           generated_tokens=self._counts["generated"], preemptions=0,
                           requests_finished=self._counts["finished"], paused=not self._open.is_set())

    async def close(self) -> None:
        """Closes this run's connection only; the server and the adapter on it stay."""
        if not self._closed:
            self._closed = True
            await self._http.close()
