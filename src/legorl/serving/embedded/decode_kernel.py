"""The embedded engine's decode attention as a small C kernel, built once per machine and called through ctypes
(the same library holds the few-row linear of skinny_linear.py).

The torch path (paged.py) gathers each decode row's KV blocks into a padded batch every layer of every step and
runs a masked bmm over it: on 2 cores with ~14 rows of ~300 tokens that was ~30% of a decode step. The kernel
(decode_kernel.c) reads each row's keys and values in place through its block table, once each; the same sums
in another order (fp32 throughout; `bench/decode_attention.py` prints both paths' times and their difference).

It is compiled with the system C compiler (`$CC`, else `cc`/`gcc`) into `$LEGORL_HOME/kernels/` under a hash of
its source, flags and compiler, in well under a second; `-ffast-math` is given to the compile step only (so
`expf` vectorises), never to the link step, which would put the whole process's FPU into flush-to-zero.
`serving.decode_attention` picks the path: `auto` (the kernel when it builds and the pool is fp32 on the CPU),
`kernel` (required: the engine refuses to start without it), `torch`.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import subprocess
import threading
from pathlib import Path

import torch

from legorl.native import BuildError, c_compiler, cached_build

MODES = ("auto", "kernel", "torch")
# one library: the decode attention, and the few-row linear of a decode step (skinny_linear.py)
_SOURCES = [Path(__file__).with_name(n) for n in ("decode_kernel.c", "skinny_linear.c")]
_lock = threading.Lock()


class KernelUnavailable(RuntimeError):
    """The decode kernel could not be built or loaded here (the message says why)."""


def _isa_flags() -> list[str]:
    """AVX2 + FMA where the CPU has them (x86-64), else the compiler's baseline for this architecture."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return []
    have = set(flags.split())
    return ["-mavx2", "-mfma"] if {"avx2", "fma"} <= have else []


def _build(cc: str) -> Path:
    compile_flags = ["-O3", "-ffast-math", "-fPIC", "-std=c11", "-pthread", *_isa_flags()]

    def commands(tmp: Path, so: Path) -> list[list[str]]:
        objs = [tmp / f"{src.stem}.o" for src in _SOURCES]
        compiles = [[cc, *compile_flags, "-c", str(src), "-o", str(obj)]
                    for src, obj in zip(_SOURCES, objs, strict=True)]
        return [*compiles, [cc, "-shared", "-pthread", *map(str, objs), "-o", str(so), "-lm"]]  # no -ffast-math here

    return cached_build(cc, "kernels", "decode_kernel.so", [*(src.read_text() for src in _SOURCES), *compile_flags],
                        commands)


@functools.cache
def _load() -> ctypes.CDLL | KernelUnavailable:
    cc = c_compiler()
    if cc is None:
        return KernelUnavailable("no C compiler (set $CC, or install gcc)")
    try:
        lib = ctypes.CDLL(str(_build(cc)))
    except BuildError as exc:
        return KernelUnavailable(str(exc))
    except (OSError, subprocess.SubprocessError) as exc:
        return KernelUnavailable(f"{type(exc).__name__}: {exc}")
    fn = lib.legorl_paged_decode
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr, ptr, i64, i64, i64, i64, i64, i64, ctypes.c_float, ptr, i64, i64,
                   i64]
    fn.restype = ctypes.c_int
    lib.legorl_skinny_linear.argtypes = [ptr, ptr, ptr, i64, i64, i64]
    lib.legorl_skinny_linear.restype = ctypes.c_int
    lib.legorl_skinny_linear_available.restype = ctypes.c_int
    return lib


def load() -> ctypes.CDLL:
    """The built kernel library (built on first use); raises KernelUnavailable with the reason."""
    with _lock:
        lib = _load()
    if isinstance(lib, KernelUnavailable):
        raise lib
    return lib


def resolve(mode: str, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether an engine whose KV pool has `dtype` on `device` runs decode attention in the kernel."""
    if mode not in MODES:
        raise ValueError(f"decode_attention must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "torch":
        return False
    fits = dtype == torch.float32 and torch.device(device).type == "cpu"
    if mode == "kernel" and not fits:
        raise KernelUnavailable(f"decode_attention = 'kernel' runs on an fp32 KV pool on the CPU (this one: "
                                f"{dtype}, {device}); use 'auto' or 'torch'")
    if not fits:
        return False
    try:
        load()
    except KernelUnavailable:
        if mode == "kernel":
            raise
        return False
    return True


def decode_attention(query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor,
                     lens: torch.Tensor, block_size: int, scale: float, out: torch.Tensor, threads: int = 1) -> None:
    """out[r, qh] = attention of query[r, qh] over the first lens[r] positions of row r's blocks, the rows split over
    up to `threads` threads (the engine's own count; each row comes out the same whatever the split).

    query [nd, heads, d] and out [nd, heads, d] may be strided views (last dim contiguous); k, v: one layer's
    pool [kv_heads, slots, d], contiguous; tables [nd, width] and lens [nd] int64, contiguous, on the CPU."""
    nd, heads, d = query.shape
    kvh, slots, _ = k.shape
    assert query.stride(2) == 1 and out.stride(2) == 1 and k.is_contiguous() and v.is_contiguous()
    lib = _load()  # cached since the engine's resolve(): no lock taken on this per-layer path
    if isinstance(lib, KernelUnavailable):
        raise lib
    rc = lib.legorl_paged_decode(
        query.data_ptr(), query.stride(0), query.stride(1), k.data_ptr(), v.data_ptr(), slots, tables.data_ptr(),
        lens.data_ptr(), nd, tables.shape[1], heads, kvh, d, block_size, scale, out.data_ptr(), out.stride(0),
        out.stride(1), max(1, threads))
    if rc:
        raise RuntimeError(f"decode kernel: {'shape out of range' if rc == 1 else 'out of memory'} "
                           f"(rows {nd}, heads {heads}/{kvh}, head dim {d}, lens {lens.tolist()})")
