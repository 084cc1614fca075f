"""The embedded engine's linear layers for steps of few rows (decode) in a C kernel (`serving.decode_linear`).

A decode step of a replica multiplies its ~10-16 rows by every weight of the model: at these shapes the BLAS GEMM
runs at about half the core's rate, and the linears are ~2/3 of the step (docs/serving.md). skinny_linear.c
streams each weight once with its next rows prefetched while the current ones are used, 1.5-2x the BLAS time at
1-14 rows for SmolLM2-135M's 30 layers and head on one core, and still 1.1-1.2x at 16-64 rows, where a step's
prompt chunk (a trial's next turn, ~30 tokens) runs beside the decode rows (`bench/skinny_linear.py`).

It runs through a torch function mode (`few_row_linears`) entered only around the engine's own forward, on the
engine's thread: `F.linear` calls of at most `MAX_ROWS` fp32 rows on the CPU without autograd go to the kernel,
every other call (a long prefill, the trainer's forwards on another thread) to torch as before. The kernel is
single-threaded, so `auto` takes it only for a one-thread engine (thread replicas on 2 cores run one each); it
needs AVX2 + FMA (built with the decode kernel, decode_kernel.py). Each output is one dot product summed in a
fixed order: a row's logits do not depend on the other rows of its step.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from legorl.serving.embedded.decode_kernel import KernelUnavailable, load

MODES = ("auto", "kernel", "torch")
MAX_ROWS = 64  # decode rows and the prompt chunks beside them; 1.1-1.2x BLAS up to here (bench/skinny_linear.py)


def resolve(mode: str, dtype: torch.dtype, device: torch.device, threads: int) -> bool:
    """Whether an engine with weights of `dtype` on `device` and `threads` intra-op threads runs its few-row
    linears in the kernel."""
    if mode not in MODES:
        raise ValueError(f"decode_linear must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "torch":
        return False
    where = torch.device(device).type
    if dtype != torch.float32 or where != "cpu" or threads != 1:
        if mode == "kernel":
            raise KernelUnavailable(f"decode_linear = 'kernel' runs fp32 weights on the CPU in a one-thread engine "
                                    f"(this one: {dtype}, {where}, {threads} threads); use 'auto' or 'torch'")
        return False
    try:
        available = bool(load().legorl_skinny_linear_available())
    except KernelUnavailable:
        if mode == "kernel":
            raise
        return False
    if not available and mode == "kernel":
        raise KernelUnavailable("decode_linear = 'kernel' needs a CPU with AVX2 and FMA; use 'auto' or 'torch'")
    return available


def _fits(x: torch.Tensor, w: torch.Tensor) -> bool:
    k = w.shape[-1]
    return (x.dtype == torch.float32 and w.dtype == torch.float32 and x.device.type == "cpu" and w.dim() == 2
            and w.is_contiguous() and k % 8 == 0 and x.shape[-1] == k and 0 < x.numel() // k <= MAX_ROWS
            and not torch.is_grad_enabled())


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` in the kernel (the caller has checked the shapes fit: `_fits`)."""
    k, n = weight.shape[1], weight.shape[0]
    rows = x.reshape(-1, k)
    if not rows.is_contiguous():
        rows = rows.contiguous()
    y = torch.empty(rows.shape[0], n, dtype=torch.float32)
    load().legorl_skinny_linear(rows.data_ptr(), weight.data_ptr(), y.data_ptr(), rows.shape[0], n, k)
    if bias is not None:
        y += bias
    return y.view(*x.shape[:-1], n)


class _FewRowLinears(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            named = dict(zip(("input", "weight", "bias"), args, strict=False)) | kwargs
            x, w = named.get("input"), named.get("weight")
            if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and _fits(x, w):
                return skinny_linear(x, w, named.get("bias"))
        return func(*args, **kwargs)


def few_row_linears(on: bool, tokens: int) -> contextlib.AbstractContextManager:
    """The mode for one engine forward of `tokens` packed tokens (nothing when off or when the step is long)."""
    return _FewRowLinears() if on and tokens <= MAX_ROWS else contextlib.nullcontext()
