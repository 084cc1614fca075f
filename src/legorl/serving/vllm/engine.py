"""The vLLM engine: one vLLM OpenAI-compatible server driven through the `Engine` protocol.

Token ids in, token ids out: prompts go to `/v1/completions` as id lists with `return_token_ids`
and per-token logprobs (the server runs with `--logprobs-mode processed_logprobs`, i.e. the
log-softmax of the temperature-scaled logits the sampler drew from), so nothing is re-tokenized.
Abort, pause/resume, weight reload and the weight version use vLLM's RL/dev endpoints
(`VLLM_SERVER_DEV_MODE=1`). KV usage and prefix-cache counters come from `/metrics`, polled in
the background because the scheduler asks synchronously. vLLM has no prefix-cache probe: the probe
raises, which the session scheduler treats as "unavailable" and admits.

Pausing is also gated here: while paused, new calls wait in this client and every in-flight call
has returned before `pause` does, so the version stamped on a request when it is sent is the
version that served all of its tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import aiohttp

from legorl.serving.types import (
    MAX_TEMPERATURE,
    MIN_TOP_P,
    CountingSink,
    EngineClosedError,
    EngineError,
    EngineStats,
    FinishReason,
    GenerateRequest,
    InvalidRequestError,
    PrefixProbe,
    TokenOutput,
    TokenSink,
)
from legorl.serving.vllm.http import check_prompt, post_checked
from legorl.serving.vllm.lora import VLLMLora
from legorl.serving.vllm.metrics import VLLMMetrics
from legorl.serving.vllm.reload import WeightLoader
from legorl.serving.vllm.server import VLLMServer, VLLMServerConfig, vocab_size
from legorl.serving.vllm.stream import attach_routing, stream_checked
from legorl.serving.vllm.transfer import CollectiveTransport
from legorl.serving.vllm.weights import (
    SafetensorsExporter,
)

log = logging.getLogger(__name__)
Mode = Literal["wait", "abort"]
_FINISH: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


class PrefixProbeUnavailable(EngineError, NotImplementedError):
    """Stock vLLM exposes no prefix-cache lookup; the scheduler admits when it sees this."""


class VLLMEngine:
    """See the module docstring. Implements `legorl.serving.types.Engine`."""

    def __init__(
        self,
        url: str,
        *,
        served_name: str,
        max_model_len: int,
        vocab_size: int | None = None,
        server: VLLMServer | None = None,
        model_dir: Path | None = None,
        exporter: SafetensorsExporter | None = None,
        seed: int = 0,
        name: str = "vllm",
        metrics_interval_s: float = 1.0,
        weight_version: int = 0,
        max_restarts: int = 3,
        owns_exporter: bool = False,
        lora: VLLMLora | None = None,
        weight_transport: Literal["files", "collective"] = "files",
        weight_sync_timeout_s: float = 60.0,
    ):
        self.url = url.rstrip("/")
        self.served_name = served_name
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.server = server
        self.model_dir = model_dir
        self.name = name
        self._seed = seed
        self._order = itertools.count()
        self._version = weight_version
        self._metrics_interval_s = metrics_interval_s
        self._metrics = VLLMMetrics()
        self._kv_budget = server.kv_budget_tokens() if server else 0
        self._session: aiohttp.ClientSession | None = None
        self._poller: asyncio.Task | None = None
        self._inflight: dict[str, asyncio.Task] = {}
        self._held: dict[str, tuple[GenerateRequest, asyncio.Event]] = {}  # at the pause gate, not sent yet
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._paused = False
        self._closed = False
        self._sync_lock = asyncio.Lock()
        self.max_restarts = max_restarts  # an owned server that dies is restarted with its weights
        self.restarts = 0
        self._revive_lock = asyncio.Lock()
        # files, the collective pair or a LoRA adapter; and what a restarted server gets back (reload.py)
        self.loader = WeightLoader(self, self._post, model_dir, exporter, owns_exporter, lora, weight_transport,
                                   weight_sync_timeout_s)

    @property
    def transport(self) -> CollectiveTransport | None:
        """The collective pair group (`weight_transport = "collective"`), else None."""
        return self.loader.transport

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    async def launch(cls, config: VLLMServerConfig, *, exporter: SafetensorsExporter | None = None,
                     name: str = "vllm", owns_exporter: bool = False, lora: VLLMLora | None = None,
                     **kw: Any) -> VLLMEngine:
        """Start a server for `config.model_dir` and return an engine that owns it (`config.lora_rank`: with
        `--enable-lora`, serving the adapters `update_weights` brings; `kw`: the weight transport)."""
        if config.lora_rank and lora is None:
            lora = VLLMLora(config.lora_rank)
        if kw.get("weight_transport") == "collective":
            config = dataclasses.replace(config, worker_extension=True)
        server = VLLMServer(config)
        await server.start()
        engine = cls(server.url, served_name=config.served_name, max_model_len=config.max_model_len,
                     vocab_size=vocab_size(config.model_dir), server=server, model_dir=config.model_dir,
                     exporter=exporter, seed=config.seed, name=name, owns_exporter=owns_exporter, lora=lora, **kw)
        log.info("vLLM replica %s ready at %s in %.1f s (log %s)", name, server.url, server.startup_s, server.log_path)
        return engine

    @classmethod
    async def attach(cls, url: str, *, model_dir: Path | None = None, exporter: SafetensorsExporter | None = None,
                     seed: int = 0, name: str = "vllm", owns_exporter: bool = False,
                     lora: VLLMLora | None = None, **kw: Any) -> VLLMEngine:
        """Drive a server someone else started (it needs VLLM_SERVER_DEV_MODE=1 for weight sync; `lora`:
        --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True too; the worker extension for
        `weight_transport="collective"`: docs/vllm.md)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            try:
                async with s.get(url.rstrip("/") + "/v1/models") as r:
                    models = (await r.json())["data"]
                async with s.get(url.rstrip("/") + "/weight_info") as r:
                    raw_version = (await r.json()).get("weight_version") if r.status == 200 else None
            except (TimeoutError, aiohttp.ClientError, KeyError, ValueError) as e:
                raise EngineError(f"no vLLM server answers at {url}: {e}") from e
        if not models:
            raise EngineError(f"the vLLM server at {url} serves no model")
        version = int(raw_version) if isinstance(raw_version, str) and raw_version.isdigit() else 0
        return cls(url, served_name=models[0]["id"], max_model_len=int(models[0].get("max_model_len") or 2048),
                   vocab_size=vocab_size(model_dir) if model_dir else None, model_dir=model_dir,
                   exporter=exporter, seed=seed, name=name, weight_version=version, owns_exporter=owns_exporter,
                   lora=lora, **kw)

    # -- protocol ----------------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._version

    async def start(self) -> None:
        if self._session is None:
            # idle connections are dropped before uvicorn's 5 s keep-alive closes them under us
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.0)
            self._session = aiohttp.ClientSession(connector=connector,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
            self._poller = asyncio.create_task(self._poll_metrics(), name=f"legorl-vllm-metrics-{self.name}")

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self._validate(request.prompt_ids)
        request.sampling.validate()
        if request.adapter is not None:  # never sample with the base while the caller asked for an adapter
            raise InvalidRequestError(f"adapter {request.adapter!r}: the vLLM engine does not serve named LoRA "
                                      "adapters yet (use the embedded engine)")
        await self.start()
        if not await self._pass_gate(request):
            return self._aborted_unsent(request)
        await self._ensure_alive()
        task = asyncio.ensure_future(self._generate_surviving(request))
        self._inflight[request.request_id] = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                await self._abort_ids([request.request_id])
            raise
        finally:
            if task.done():
                self._inflight.pop(request.request_id, None)
            else:
                task.add_done_callback(lambda _: self._inflight.pop(request.request_id, None))

    async def _generate_surviving(self, request: GenerateRequest) -> TokenOutput:
        """A call cut by the server's death runs again, whole, on the restarted server (same seed); a
        streamed one re-checks the tokens it already sent and streams only the rest."""
        seed = request.sampling.seed
        if seed is None:  # drawn once, so a re-run after a restart samples the same tokens
            seed = (self._seed * 1_000_003 + next(self._order)) % (2**63)
        sent = CountingSink(request.on_tokens) if request.on_tokens is not None else None
        if sent is not None:
            request = dataclasses.replace(request, on_tokens=sent)
        try:
            return await self._generate(request, self._version, seed)
        except EngineError:
            if self._closed or self.server is None or not await self.server.died(within_s=3.0):
                raise
        await self._ensure_alive()
        if sent is not None and sent.n:
            request = dataclasses.replace(request, on_tokens=sent.replay())
        return await self._generate(request, self._version, seed)

    async def _generate(self, request: GenerateRequest, version: int, seed: int) -> TokenOutput:
        sp, ids = request.sampling, request.prompt_ids
        body: dict[str, Any] = {
            "model": self._model(), "prompt": list(ids), "request_id": request.request_id,
            "max_tokens": min(sp.max_tokens, self.max_model_len - len(ids)),
            # extreme but valid values, bounded so vLLM's float32 sampler stays finite for the whole batch
            "temperature": min(sp.temperature, MAX_TEMPERATURE), "top_p": max(sp.top_p, MIN_TOP_P), "seed": seed,
            "stop_token_ids": list(sp.stop_token_ids), "ignore_eos": sp.ignore_eos,
            "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        if 0 < sp.top_k < (self.vocab_size or 2**31 - 1):
            body["top_k"] = int(sp.top_k)
        t0 = time.perf_counter()
        if request.on_tokens is not None and not request.return_routed_experts:  # R3 rows come whole, at the end
            data = await self._stream(body, request.on_tokens)
        else:
            data = await self._post("/v1/completions", body)
        choice = data["choices"][0]
        tokens = [int(t) for t in choice.get("token_ids") or []]
        lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
        if len(lp) != len(tokens):
            raise EngineError(f"vLLM returned {len(tokens)} tokens but {len(lp)} logprobs")
        details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
        out = TokenOutput(
            request_id=request.request_id, prompt_len=len(ids), token_ids=tokens,
            logprobs=[float(x) if x is not None else math.nan for x in lp],
            finish_reason=_FINISH.get(choice.get("finish_reason"), "stop"), weight_version=version,
            cached_prompt_tokens=int(details.get("cached_tokens") or 0), decode_time_s=time.perf_counter() - t0,
        )
        if request.return_routed_experts:
            attach_routing(out, choice.get("routed_experts"))
        return out

    def _model(self) -> str:
        return self.loader.model(self.served_name)

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0) -> list[float | None]:
        """vLLM computes prompt logprobs from the raw logits: only temperature 1 is exact."""
        if abs(temperature - 1.0) > 1e-6:
            raise InvalidRequestError(
                f"vLLM returns prompt logprobs at temperature 1 only (asked {temperature}); "
                "use rollout.temperature=1.0 with scaffolds that rewrite history, or the embedded engine")
        self._validate(token_ids)
        await self.start()
        await self._unpaused.wait()
        await self._ensure_alive()
        body = {"model": self._model(), "prompt": list(token_ids), "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": 0, "return_token_ids": True}
        data = await self._post("/v1/completions", body)
        rows = data["choices"][0].get("prompt_logprobs") or []
        if len(rows) != len(token_ids):
            raise EngineError(f"vLLM returned {len(rows)} prompt logprobs for {len(token_ids)} tokens")
        out: list[float | None] = [None]
        for tok, row in zip(token_ids[1:], rows[1:], strict=True):
            entry = (row or {}).get(str(tok))
            if entry is None:
                raise EngineError(f"vLLM prompt logprobs miss token {tok}")
            out.append(float(entry["logprob"]))
        return out

    async def _pass_gate(self, request: GenerateRequest) -> bool:
        """Wait out a pause; False when the request was aborted while it waited."""
        if self._unpaused.is_set():
            return True
        dropped = asyncio.Event()
        self._held[request.request_id] = (request, dropped)
        waits = {asyncio.ensure_future(self._unpaused.wait()), asyncio.ensure_future(dropped.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            self._held.pop(request.request_id, None)
        return not dropped.is_set()

    def _aborted_unsent(self, request: GenerateRequest) -> TokenOutput:
        return TokenOutput(request_id=request.request_id, prompt_len=len(request.prompt_ids), token_ids=[],
                           logprobs=[], finish_reason="abort", weight_version=self._version)

    async def abort(self, request_id: str) -> TokenOutput | None:
        held = self._held.get(request_id)
        if held is not None:  # still waiting out a pause: it never reaches the server
            held[1].set()
            return self._aborted_unsent(held[0])
        task = self._inflight.get(request_id)
        if task is None:
            return None
        await self._abort_ids([request_id])
        try:
            return await asyncio.shield(task)
        except EngineError:
            return None

    async def _abort_ids(self, request_ids: list[str]) -> None:
        # the completions route names a request "cmpl-<request_id>-<prompt index>"
        try:
            await self._post("/abort_requests", {"request_ids": [f"cmpl-{r}-0" for r in request_ids]})
        except EngineError as e:  # the server is gone: the request is too
            log.warning("vLLM abort failed on %s: %s", self.name, e)

    def kv_cache_usage(self) -> float:
        return self._metrics.kv_cache_usage

    def prefix_cache_probe(self, token_ids: list[int]) -> PrefixProbe:
        raise PrefixProbeUnavailable("vLLM has no prefix-cache probe")

    async def update_weights(self, state_dict: Mapping[str, object], version: int, mode: Mode = "wait") -> None:
        """Validate, then send the weights over the pair group (`transport`) or write safetensors (once per version
        per exporter) and reload them; reset the prefix cache (cached KV belongs to the old weights) and record
        the version. After a failed collective sync (or a restart that lost the weights) only a full state dict
        is taken, by files; the replica serves nothing until then. A LoRA run's update is its adapter: written
        as a PEFT directory and loaded under a new name (lora.py)."""
        prepared = await self.loader.prepare(state_dict, version)
        await self._ensure_alive()
        async with self._sync_lock:
            was_paused = self._paused
            if not was_paused:
                await self.pause(mode)
            try:
                await self.loader.apply(state_dict, version, prepared)
                await self._post("/reset_prefix_cache", None)
                self._version = version
            finally:
                if not was_paused:
                    await self.resume()

    async def pause(self, mode: Mode = "wait") -> None:
        """New calls wait here; in-flight ones finish (`wait`) or return partial output (`abort`)."""
        await self.start()
        self._paused = True
        self._unpaused.clear()
        await self._post(f"/pause?mode={mode}", None)
        pending = list(self._inflight.values())
        if pending:
            await asyncio.gather(*(asyncio.shield(t) for t in pending), return_exceptions=True)

    async def resume(self) -> None:
        if self._closed:
            return
        try:
            await self._post("/resume", None)
        finally:  # a dead server is restarted (unpaused) by the next call: callers never wait on it
            self._paused = False
            self._unpaused.set()

    def stats(self) -> EngineStats:
        m = self._metrics
        cached = m.prefix_cache_hits
        return EngineStats(
            weight_version=self._version, running=m.running, waiting=m.waiting,
            kv_cache_usage=m.kv_cache_usage, kv_budget_tokens=m.kv_budget_tokens or self._kv_budget,
            prefill_tokens_computed=max(m.prompt_tokens - cached, 0), prefill_tokens_cached=cached,
            generated_tokens=m.generation_tokens, preemptions=m.preemptions, requests_finished=m.requests_finished,
            paused=self._paused,
        )

    async def refresh_metrics(self) -> VLLMMetrics:
        """Read `/metrics` now (the poller does it every `metrics_interval_s`)."""
        await self.start()
        assert self._session is not None
        try:
            async with self._session.get(self.url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
                self._metrics = VLLMMetrics.parse(await r.text())
        except (TimeoutError, aiohttp.ClientError):
            self._metrics = VLLMMetrics()  # NaN usage: the scheduler sees the probe as unavailable
        return self._metrics

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unpaused.set()  # waiting callers wake and fail with EngineClosedError
        for t in list(self._inflight.values()):
            t.cancel()
        if self._poller is not None:
            self._poller.cancel()
        if self._session is not None:
            await self._session.close()
        if self.server is not None:
            await self.server.stop()
        self.loader.close()

    # -- internals -----------------------------------------------------------------------------
    async def _poll_metrics(self) -> None:
        while not self._closed:
            await self.refresh_metrics()
            await asyncio.sleep(self._metrics_interval_s)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError(f"engine {self.name} is closed")
        if self.server is not None and not self.server.alive and self.restarts >= self.max_restarts:
            raise EngineClosedError(f"vLLM server of {self.name} died {self.restarts + 1} times, last: "
                                    f"{self.server.last_error()} (log: {self.server.log_path})")

    async def _ensure_alive(self) -> None:
        """Restart an owned server that died (up to `max_restarts` times) and give it back the weight
        version it served: the newest exported version, or the checkpoint for version 0."""
        if self.server is None or self.server.alive or self._closed:
            return
        async with self._revive_lock:
            if self.server.alive:
                return
            self._check_open()
            self.restarts += 1
            log.warning("vLLM server of %s died (%s); restarting it (%d of %d)", self.name,
                        self.server.last_error(), self.restarts, self.max_restarts)
            try:
                await self.server.restart()
            except EngineError as exc:  # closed: a pool fails the replica's calls over to the others
                raise EngineClosedError(f"vLLM server of {self.name} died and did not restart: {exc}") from exc
            await self.loader.restore(self._version, self.name)

    def _validate(self, ids: list[int]) -> None:
        self._check_open()
        if self.loader.waits_for_full_sync:  # never serve a mix of two versions
            raise EngineError(f"{self.name} waits for a full weight sync (the last collective sync failed)")
        check_prompt(ids, self.vocab_size, self.max_model_len)

    async def _post(self, path: str, body: dict[str, Any] | None, plain: bool = False) -> dict[str, Any]:
        """POST, raising the engine error a failure means; `plain`: the route answers text (`{"text": ...}`)."""
        await self.start()
        assert self._session is not None
        try:
            return await post_checked(self._session, self.url, path, body, self.max_model_len, plain)
        except EngineError:
            self._check_open()
            raise

    async def _stream(self, body: dict[str, Any], sink: TokenSink) -> dict[str, Any]:
        """`/v1/completions` streamed: `sink` gets each chunk's ids (not retried: tokens went out)."""
        await self.start()
        assert self._session is not None
        try:
            return await stream_checked(self._session, self.url, body, sink, self.max_model_len)
        except EngineError:
            self._check_open()
            raise
