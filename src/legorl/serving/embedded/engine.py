"""The embedded engine: an HF causal LM served with continuous batching on CPU (or one GPU).

One background thread owns the model and the KV pool and runs the scheduler loop: apply commands
(submit, abort, weight update, pause), then one packed step: every running request's next token plus
prompt chunks of running and newly admitted requests, up to a token budget (scheduler.py), in one
forward whose attention reads the paged pool in place (paged.py), then one vectorised sampling pass.
A request that arrives while others decode joins at the next step. When the KV budget runs out, the
youngest running request is preempted and later recomputed (its sampled tokens are kept; cached
blocks make the recompute cheap). The asyncio side (this module) only enqueues commands and awaits futures;
the thread's half lives in engine_thread.py.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from legorl.models.moe import RoutingRecorder
from legorl.serving.adapter import is_adapter_update
from legorl.serving.embedded.blocks import BlockPool, chain_hashes
from legorl.serving.embedded.channel import CommandChannel
from legorl.serving.embedded.checks import check_ids, check_request
from legorl.serving.embedded.decode_kernel import resolve as resolve_decode_kernel
from legorl.serving.embedded.engine_thread import EngineThread
from legorl.serving.embedded.lora import AdapterSet
from legorl.serving.embedded.omp import release_idle_workers
from legorl.serving.embedded.runner import ModelRunner, model_device, probe_kv_dims
from legorl.serving.embedded.scheduler import Scheduler
from legorl.serving.embedded.sequence import Sequence
from legorl.serving.embedded.skinny_linear import resolve as resolve_linear_kernel
from legorl.serving.types import (
    ContextLengthError,
    EngineClosedError,
    EngineStats,
    GenerateRequest,
    InvalidRequestError,
    PrefixProbe,
    TokenOutput,
)

Mode = Literal["wait", "abort"]


class EmbeddedEngine(EngineThread):
    """See the module docstring. Implements `legorl.serving.types.Engine`."""

    accepts_weight_buckets = True  # a partial update copies those tensors in place (WeightSync streams)

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        kv_budget_tokens: int = 16384,
        block_size: int = 16,
        max_num_seqs: int = 32,
        max_model_len: int | None = None,
        prefill_chunk: int = 512,  # the step's token budget (decode rows + prompt chunks)
        seed: int = 0,
        eos_token_ids: list[int] | None = None,
        enable_prefix_caching: bool = True,
        num_threads: int | None = None,
        name: str = "embedded",
        shares_weights: bool = False,
        decode_attention: str = "auto",
        decode_linear: str = "auto",
        lean_decode: bool = True,
    ):
        self.model = model.eval()
        # `model` is also served by other engines of this process (create_pool): full-weight updates are fine
        # (every sharer is paused first and copies the same values), LoRA would mutate the others' weights
        self.shares_weights = shares_weights
        self.num_threads = num_threads or torch.get_num_threads()
        self.name = name
        cfg = model.config
        self.vocab_size = int(cfg.vocab_size)
        window = int(getattr(cfg, "max_position_embeddings", 0) or 2048)
        self.max_model_len = min(window, max_model_len) if max_model_len else window
        self.max_num_seqs = max_num_seqs
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        if eos_token_ids is None:
            eos = getattr(cfg, "eos_token_id", None)
            eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos_token_ids = list(eos_token_ids)
        self.recorder = RoutingRecorder(model)
        if shares_weights and self.recorder.enabled:
            raise ValueError("MoE engines cannot share a model: each records the routing of its own forwards")
        dims = probe_kv_dims(model)
        self.recorder.take()
        routing_shape = (len(self.recorder.routers), self.recorder.top_k) if self.recorder.enabled else None
        self.pool = BlockPool(
            max(kv_budget_tokens // block_size, 2), block_size, dims.layers, dims.kv_heads, dims.head_dim,
            dims.dtype, routing_shape, device=model_device(model),
        )
        self._adapters = AdapterSet(model)  # LoRA: named adapters and the default one (lora.py)
        # `auto`: the C kernel when it builds and the pool is fp32 on the CPU (decode_kernel.py), else torch
        self.decode_kernel = resolve_decode_kernel(decode_attention, self.pool.k.dtype, self.pool.k.device)
        # `auto`: the few-row linears in the C kernel for a one-thread engine of fp32 weights on the CPU
        weight = next(model.parameters())
        self.linear_kernel = resolve_linear_kernel(decode_linear, weight.dtype, weight.device, self.num_threads)
        self.runner = ModelRunner(model, self.pool, self.recorder, self._adapters, self.decode_kernel,
                                  self.num_threads, self.linear_kernel, lean_decode)
        self.scheduler = Scheduler(self.pool, max_num_seqs, prefill_chunk, enable_prefix_caching)
        self._seed = seed
        self._order = itertools.count()
        self._version = 0
        self._waiting: deque[Sequence] = self.scheduler.waiting
        self._running: list[Sequence] = self.scheduler.running
        self._channel = CommandChannel()
        self._barriers: deque[tuple[Any, ...]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._paused = False
        # steps / mixed_steps (decode rows and prompt chunks together) / most prompts in one step: for tests
        self._counters = dict.fromkeys(
            ["generated", "finished", "prefill_s", "decode_s", "steps", "mixed_steps", "max_prompts_per_step"], 0
        )
        self._release_caller_omp()  # the probe forward above started one on this thread

    def _release_caller_omp(self) -> None:
        """Free the calling thread's idle OpenMP workers so the engine thread's team keeps spinning
        (see `omp.py`; a single-threaded engine starts no team and needs nothing)."""
        if self.num_threads > 1:
            release_idle_workers()

    @classmethod
    def from_pretrained(cls, spec: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                        **kwargs: Any) -> EmbeddedEngine:
        """Load a model by store name or local HF directory onto `device` (its KV pool goes there too;
        default fp32: on CPU bf16 is ~4x slower and shifts logprobs; bf16 is a GPU engine's precision)."""
        from transformers import AutoModelForCausalLM

        from legorl.models.store import resolve_model

        path = resolve_model(spec)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        kwargs.setdefault("name", path.name)
        return cls(model, **kwargs)

    # -- public API (asyncio side) --------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._version

    async def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"legorl-engine-{self.name}", daemon=True)
            self._thread.start()

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self._validate(request)
        await self.start()
        self._release_caller_omp()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        seed = request.sampling.seed
        gen = torch.Generator().manual_seed(seed if seed is not None else self._seed * 1_000_003 + next(self._order))
        seq = Sequence(request, fut, loop, gen, next(self._order), tokens=list(request.prompt_ids),
                       prompt_len=len(request.prompt_ids))
        self._submit(("submit", seq))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            self._submit(("abort", request.request_id, None))
            raise

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0,
                              adapter: str | None = None) -> list[float | None]:
        if not token_ids:
            raise InvalidRequestError("prompt_logprobs needs at least one token")
        self._check_ids(token_ids)
        if len(token_ids) > self.max_model_len:
            raise ContextLengthError(
                f"sequence of {len(token_ids)} tokens exceeds the model's context of {self.max_model_len}",
                len(token_ids), self.max_model_len,
            )
        self._check_adapter(adapter)
        return await self._call("logprobs", list(token_ids), temperature, adapter)

    async def abort(self, request_id: str) -> TokenOutput | None:
        return await self._call("abort", request_id)

    async def update_weights(self, state_dict: Mapping[str, Any], version: int, mode: Mode = "wait") -> None:
        if is_adapter_update(state_dict):
            self._refuse_adapters()
        await self._call("update", state_dict, version, mode)

    async def load_adapter(self, name: str, state_dict: Mapping[str, Any], version: int, mode: Mode = "wait") -> None:
        """Add or replace the named LoRA adapter `name` as `version`: only its own requests wait for (or, with
        "abort", lose) the swap; requests on the base or other adapters go on."""
        if not name:
            raise InvalidRequestError("an adapter needs a name")
        self._refuse_adapters()
        await self._call("adapter", name, state_dict, version, mode)

    def adapters(self) -> dict[str, int]:
        """The named adapters this engine holds and their weight versions."""
        return self._adapters.names()

    async def pause(self, mode: Mode = "wait") -> None:
        await self._call("pause", mode)

    async def sleep(self, mode: Mode = "wait") -> None:
        """Pause, then give the KV pool's memory back (every cached prefix is dropped) until `resume`, which
        allocates it again: a synchronous run's update gets the pool's memory (`serving.free_kv_during_update`,
        as vLLM's sleep mode frees the KV cache for colocated training). Requests sent meanwhile wait."""
        await self._call("sleep", mode)

    async def resume(self) -> None:
        """End a pause or a sleep."""
        await self._call("resume")

    def kv_cache_usage(self) -> float:
        return self.pool.usage()

    def prefix_cache_probe(self, token_ids: list[int], adapter: str | None = None) -> PrefixProbe:
        usable = max(len(token_ids) - 1, 0) // self.block_size
        try:
            root = self._root(adapter)
        except KeyError:
            return PrefixProbe(0, len(token_ids))
        hashes = chain_hashes(token_ids, self.block_size, root, usable)
        return PrefixProbe(len(self.pool.match(hashes)) * self.block_size, len(token_ids))

    def stats(self) -> EngineStats:
        c = {**self._counters, **self.scheduler.counters}
        return EngineStats(
            weight_version=self._version, running=len(self._running), waiting=len(self._waiting),
            kv_cache_usage=self.pool.usage(), kv_budget_tokens=self.pool.num_blocks * self.block_size,
            prefill_tokens_computed=c["prefill_computed"], prefill_tokens_cached=c["prefill_cached"],
            generated_tokens=c["generated"], preemptions=c["preemptions"], requests_finished=c["finished"],
            paused=self._paused, prefill_s=c["prefill_s"], decode_s=c["decode_s"], steps=c["steps"],
            kv_bytes=self.pool.k.nbytes + self.pool.v.nbytes,
        )

    async def close(self) -> None:
        if self._closed:
            return
        # closed first: every later call fails fast; calls queued before the close command are failed
        # by the engine thread on its way out, so no caller is left waiting
        self._closed = True
        if self._thread is not None:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            self._submit(("close", (loop, fut)))
            await fut
            await loop.run_in_executor(None, self._thread.join)
        self.recorder.remove()
        self.runner.close()

    # -- plumbing ---------------------------------------------------------------------------------
    def _check_ids(self, ids: list[int]) -> None:
        check_ids(ids, self.vocab_size)

    def _validate(self, request: GenerateRequest) -> None:
        if self._closed:
            raise EngineClosedError("engine is closed")
        check_request(request, self.vocab_size, self.max_model_len, self.pool.num_blocks * self.block_size)
        self._check_adapter(request.adapter)

    def _refuse_adapters(self) -> None:
        if self.shares_weights:
            raise InvalidRequestError(
                f"engine {self.name} shares its weights with the other replicas of this process, and a LoRA adapter "
                "is merged into the weights: start the replicas with their own weights (LoRA runs do)")

    def _check_adapter(self, name: str | None) -> None:
        if name is not None and name not in self._adapters.adapters:
            known = ", ".join(sorted(self._adapters.names())) or "none"
            raise InvalidRequestError(f"unknown adapter {name!r}; this engine holds: {known}")

    def _submit(self, cmd: tuple[Any, ...]) -> None:
        self._channel.submit(cmd)

    async def _call(self, kind: str, *args: Any) -> Any:
        if self._closed:
            raise EngineClosedError("engine is closed")
        await self.start()
        self._release_caller_omp()
        return await self._channel.call(kind, *args)
