"""Model forward passes over the paged KV pool: one packed step of decode rows and prefill chunks.

The model is a plain HF causal LM whose attention backend is the pool itself (paged.py): new K/V are
written in place and attention reads each request's blocks, so no per-batch cache exists to rebuild.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from legorl.models.moe import RoutingRecorder
from legorl.serving.embedded.batch import StepInputs, Work, build
from legorl.serving.embedded.blocks import BlockPool
from legorl.serving.embedded.lean import LeanDecoder
from legorl.serving.embedded.lora import Adapter, AdapterSet
from legorl.serving.embedded.paged import active, install, uninstall
from legorl.serving.embedded.skinny_linear import few_row_linears


@dataclass
class KVDims:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def probe_kv_dims(model) -> KVDims:
    """Read the KV layout from one tiny forward (robust to GQA, head_dim overrides, etc.)."""
    cache = DynamicCache()
    model(input_ids=torch.tensor([[0]], device=model_device(model)), cache=cache, use_cache=True)
    k = cache.layers[0].keys
    return KVDims(len(cache.layers), k.shape[1], k.shape[3], k.dtype)


class ModelRunner:
    """Runs packed steps of the engine's model over the pool (see batch.py and paged.py)."""

    def __init__(self, model, pool: BlockPool, recorder: RoutingRecorder, adapters: AdapterSet | None = None,
                 decode_kernel: bool = False, threads: int = 1, linear_kernel: bool = False, lean_decode: bool = True):
        self.model = model
        self.linear_kernel = linear_kernel  # few-row steps' linears in the C kernel (skinny_linear.py)
        self.decode_kernel = decode_kernel  # decode attention in the C kernel (decode_kernel.py)
        self.threads = threads  # the engine's intra-op threads: the kernel splits its rows over them
        self.adapters = adapters  # LoRA: each row's adapter, applied per step (lora.py)
        self.device = model_device(model)  # inputs go here; block tables and sampling stay on the CPU
        self.pool = pool
        self.recorder = recorder
        # steps of decode rows only without the HF modules (lean.py): with both C kernels, where the model allows
        self.lean = LeanDecoder.for_model(model) if lean_decode and decode_kernel and linear_kernel else None
        self.lean_steps = 0  # steps it ran (tests, benches)
        # a 4-D mask makes HF skip building one (the paged backend masks by itself)
        self._no_mask = torch.zeros((1, 1, 1, 1), dtype=pool.k.dtype, device=self.device)
        install(model)

    def close(self) -> None:
        uninstall(self.model)

    @torch.no_grad()
    def step(self, work: list[Work], adapter_of=None) -> tuple[StepInputs, torch.Tensor, torch.Tensor | None]:
        """One forward over `work`. Returns the packed inputs (work in packed order), the logits [S, V] of
        the sampling items (in that order) and the routing [T, L, k] of every packed token (MoE).
        `adapter_of(seq)`: the LoRA adapter a request runs with (None: the base)."""
        lora: contextlib.AbstractContextManager = contextlib.nullcontext()
        if self.adapters is not None and self.adapters.adapters and adapter_of is not None:
            # rows of one adapter next to each other (build keeps this order within decode rows and chunks)
            work = sorted(work, key=lambda w: w.seq.request.adapter or "")
            inputs = build(self.pool, work, self.device, self.decode_kernel, self.threads)
            lora = self.adapters.rows([adapter_of(w.seq) for w in inputs.work], [w.n for w in inputs.work])
        else:
            inputs = build(self.pool, work, self.device, self.decode_kernel, self.threads)
        self.recorder.take()
        tokens = int(inputs.input_ids.numel())
        if self.lean is not None and inputs.batch.n_dec == tokens and not (self.adapters and self.adapters.adapters):
            self.lean_steps += 1
            return inputs, self.lean(inputs.input_ids, inputs.position_ids, inputs.keep, inputs.batch), None
        with active(inputs.batch), lora, few_row_linears(self.linear_kernel, tokens):
            out = self.model(input_ids=inputs.input_ids, position_ids=inputs.position_ids,
                             attention_mask=self._no_mask, use_cache=False, logits_to_keep=inputs.keep)
        routing = self.recorder.take()
        return inputs, _host(out.logits[0]), (_host(routing) if routing is not None else None)

    @torch.no_grad()
    def full_logprobs(self, tokens: list[int], temperature: float,
                      adapter: Adapter | None = None) -> list[float | None]:
        """Teacher-forced log p(tokens[i] | tokens[:i]) without touching the pool, under `adapter`."""
        ids = torch.tensor([tokens], device=self.device)
        lora = self.adapters.rows([adapter]) if self.adapters is not None else contextlib.nullcontext()
        with lora:
            logits = self.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        self.recorder.take()
        if temperature > 0:
            logits = logits / temperature
        lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        return [None, *lp.cpu().tolist()]


def _host(t: torch.Tensor) -> torch.Tensor:
    """Logits and routing to the CPU, where the per-row seeded samplers run (a no-op on CPU)."""
    return t if t.device.type == "cpu" else t.float().cpu() if t.is_floating_point() else t.cpu()
