"""Attention that reads and writes the paged KV pool in place, as an HF attention backend.

One engine step is one packed forward: every scheduled token of every request in a single row
(`input_ids` [1, T], per-token `position_ids`), decode rows first, then prefill chunks. The model runs
unchanged; its attention modules call `paged_attention` (registered under `BACKEND` and set on the
engine's model config), which for layer l:

- writes the step's new K/V into the pool at their slots (so nothing is gathered into a per-batch cache
  and nothing is re-gathered when batch membership changes),
- decode rows: the C kernel (decode_kernel.py) reads each row's keys and values in place through its block
  table; without it (`serving.decode_attention = "torch"`, a bf16 or CUDA pool) each row's blocks of layer l
  are gathered (block-granular `index_select`) into one batched GQA attention, padded to the longest row and masked,
- prefill chunks: causal SDPA over the chunk (and the request's earlier blocks when it has a prefix).

Outside an engine step (the trainer, a teacher-forced forward on the same model object) the backend
delegates to the model's original implementation, so sharing a model with the engine changes nothing.
"""

from __future__ import annotations

import sys
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from legorl.serving.embedded.decode_kernel import decode_attention

BACKEND = "legorl_paged"
# config id -> (a weak reference to it, its original backend, engines using it): kept off the config, whose
# attributes save_pretrained writes into config.json (a trainer's checkpoint of a model its engines serve)
_INSTALLED: dict[int, tuple[weakref.ref, str, int]] = {}
_local = threading.local()


@dataclass
class PrefillPart:
    """A chunk of one request: packed tokens [t0, t0 + n) at positions [start, start + n)."""

    t0: int
    n: int
    start: int
    blocks: torch.Tensor  # block ids covering positions [0, start + n)


@dataclass
class StepBatch:
    """What every layer of one step needs, built once (see batch.py)."""

    k: torch.Tensor  # pool K [layers, kv_heads, slots, head_dim]
    v: torch.Tensor
    block_size: int
    write_slots: torch.Tensor  # [T] pool slot of each packed token
    n_dec: int = 0  # packed tokens [0, n_dec) are one-token rows
    dec_blocks: torch.Tensor | None = None  # [n_dec * blocks_per_row] (pad block past a row's end)
    dec_mask: torch.Tensor | None = None  # [1, n_dec, 1, blocks_per_row * block_size] additive
    dec_tables: torch.Tensor | None = None  # the kernel's: [n_dec, blocks_per_row] block ids (CPU, int64)
    dec_lens: torch.Tensor | None = None  # the kernel's: [n_dec] context length of each row (CPU, int64)
    dec_threads: int = 1  # the kernel's: threads its rows are split over (the engine's thread count)
    prefills: list[PrefillPart] = field(default_factory=list)


@contextmanager
def active(step: StepBatch):
    """Route this thread's attention calls to the pool for one forward."""
    _local.step = step
    try:
        yield
    finally:
        _local.step = None


def _original(module):
    name = _original_name(module.config)
    if name in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[name]
    # "eager" lives in each modeling file
    return sys.modules[type(module).__module__].eager_attention_forward


def _gather(pool_l: torch.Tensor, blocks: torch.Tensor, bs: int) -> torch.Tensor:
    """[kv_heads, len(blocks) * bs, head_dim] of one layer, in block-table order."""
    h, _, d = pool_l.shape
    return pool_l.view(h, -1, bs * d).index_select(1, blocks).view(h, -1, d)


def paged_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    step: StepBatch | None = getattr(_local, "step", None)
    if step is None:
        return _original(module)(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    pk, pv = step.k[layer], step.v[layer]
    pk.index_copy_(1, step.write_slots, key[0])
    pv.index_copy_(1, step.write_slots, value[0])
    _, heads, t, d = query.shape
    kvh = key.shape[1]
    g = heads // kvh
    scale = scaling if scaling is not None else d**-0.5
    out = query.new_empty(t, heads, d)
    bs = step.block_size
    nd = step.n_dec
    if nd and step.dec_tables is not None:
        q = query[0, :, :nd].transpose(0, 1)  # [nd, heads, d], a view
        decode_attention(q if q.stride(2) == 1 else q.contiguous(), pk, pv, step.dec_tables, step.dec_lens, bs,
                         scale, out[:nd], step.dec_threads)
    elif nd:
        q = query[0, :, :nd].reshape(kvh, g, nd, d).transpose(1, 2)  # [kvh, nd, g, d]
        kg = _gather(pk, step.dec_blocks, bs).view(kvh, nd, -1, d)
        vg = _gather(pv, step.dec_blocks, bs).view(kvh, nd, -1, d)
        s = torch.matmul(q, kg.transpose(-1, -2))  # [kvh, nd, g, T]
        s.mul_(scale).add_(step.dec_mask)
        o = torch.matmul(torch.softmax(s, dim=-1), vg)  # [kvh, nd, g, d]
        out[:nd] = o.permute(1, 0, 2, 3).reshape(nd, heads, d)
    for p in step.prefills:
        q = query[:, :, p.t0 : p.t0 + p.n]
        if p.start == 0:
            k, v, mask, causal = key[:, :, p.t0 : p.t0 + p.n], value[:, :, p.t0 : p.t0 + p.n], None, True
        else:
            ctx = p.start + p.n
            k = _gather(pk, p.blocks, bs)[None, :, :ctx]
            v = _gather(pv, p.blocks, bs)[None, :, :ctx]
            mask = torch.ones(p.n, ctx, dtype=torch.bool, device=query.device).tril(p.start)
            causal = False
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=g > 1)
        out[p.t0 : p.t0 + p.n] = o[0].transpose(0, 1)
    return out[None], None


def _mask(config=None, **kwargs):
    """Mask creation outside an engine step: the original backend's (an engine step passes a 4-D mask,
    which HF returns as-is)."""
    name = _original_name(config)
    fn = ALL_MASK_ATTENTION_FUNCTIONS.get(name, None)
    return fn(config=config, **kwargs) if fn is not None else None


AttentionInterface.register(BACKEND, paged_attention)
AttentionMaskInterface.register(BACKEND, _mask)


def _entry(cfg) -> tuple[weakref.ref, str, int] | None:
    entry = _INSTALLED.get(id(cfg))
    return entry if entry is not None and entry[0]() is cfg else None


def _original_name(cfg) -> str:
    entry = _entry(cfg) if cfg is not None else None
    return entry[1] if entry is not None else "sdpa"


def install(model) -> None:
    """Point the model's config at the paged backend (counted: engines may share a model)."""
    cfg = model.config
    entry = _entry(cfg)
    if entry is None:
        current = cfg._attn_implementation
        entry = (weakref.ref(cfg), current if current and current != BACKEND else "sdpa", 0)
        cfg._attn_implementation = BACKEND
    _INSTALLED[id(cfg)] = (entry[0], entry[1], entry[2] + 1)


def uninstall(model) -> None:
    """Give the model its original backend back once its last engine closes."""
    cfg = model.config
    entry = _entry(cfg)
    if entry is None:
        return
    if entry[2] > 1:
        _INSTALLED[id(cfg)] = (entry[0], entry[1], entry[2] - 1)
        return
    del _INSTALLED[id(cfg)]
    if cfg._attn_implementation == BACKEND:
        cfg._attn_implementation = entry[1]
