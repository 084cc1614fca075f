"""The process heap of `legorl train` (glibc): fewer malloc arenas, and freed memory handed back to the
kernel between phases.

torch frees a tensor's buffer to malloc; glibc keeps freed pages inside its arenas (one per thread that
allocated, up to 8 x cores) and returns them only from an arena's top. After the warm start's model,
gradients and AdamW state (~2 GB at 135M) or a trainer update's activations are freed, the pages stay
resident and the next phase's allocations land beside them: RSS grows by whole phases. `malloc_trim(0)`
hands every free page back (MADV_DONTNEED, glibc >= 2.8); `M_ARENA_MAX` bounds how many arenas keep
their own free lists. A fixed `M_MMAP_THRESHOLD` of 1 MiB keeps large buffers out of the heap: glibc's
default threshold starts at 128 KiB and rises to the size of every mmapped block freed (up to 32 MiB), so
after the first update a layer's multi-MiB activations and gradients are carved from the heap, where a
few live blocks pin the freed ones between them (~0.85 GB of the update's peak at 135M; docs/agent.md,
Memory). That threshold holds only while an update runs (`update_heap`): every large buffer then costs an mmap
and fresh zeroed pages, which made the warm start's SFT 1.2x slower (sys time 3x) and the embedded engines'
steps 1.03-1.06x slower (their prompt chunks' activations and the logits are 1-4 MiB buffers made every step), and
the peak of the other phases is below the update's anyway. Between updates the threshold sits at glibc's own
ceiling (`ROLLOUT_MMAP_THRESHOLD`), where the dynamic one ends up, and the heap is trimmed on each side of an
update, so what the rollout freed is not resident under the update's peak. None of this changes a computed
value. No-ops off glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
from collections.abc import Iterator
from functools import cache

M_MMAP_THRESHOLD = -3  # mallopt parameter numbers from <malloc.h>
M_ARENA_MAX = -8
ARENA_MAX = 2  # the event loop's thread and everything else (engine, update, workers) share two arenas
# bench/update_memory.py (AVX2 box, --groups 2): 2026-12-05, update peak 3.64 GB at 1 MiB vs 4.39 GB at
# glibc's dynamic threshold, at 89.6 vs 78.4 s an update; 2026-12-04 (MALLOC_MMAP_THRESHOLD_), 3.55 vs 4.27 GB
# at 81 vs 84 s, 3.43 GB at 128 KiB (106 s: page faults), 4.27 GB at 4 MiB (docs/agent.md, Memory). The warm
# start's SFT (one epoch of 40 look-act transcripts, MALLOC_MMAP_THRESHOLD_=1048576 against unset, 2-core Zen 4,
# 2026-12-06): 64.6 / 66.7 s against 55.0 / 53.0 s, sys 25.7 / 27.0 against 8.8 / 9.2 s
MMAP_THRESHOLD = 1 << 20
# Between updates: glibc's ceiling for its dynamic threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX). 16 multi-turn
# sessions on one one-thread engine (bench/engine_turns.py --variants rows64,mmap1m, 2026-12-06, Zen 4): 17.66 s of
# engine steps against 18.64 s at 1 MiB (docs/agent-lookact.md "The engines off the update's mmap threshold")
ROLLOUT_MMAP_THRESHOLD = 32 << 20


@cache
def _libc():
    if os.uname().sysname != "Linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(n: int = ARENA_MAX) -> bool:
    """Cap glibc's malloc arenas for threads started from now on (set MALLOC_ARENA_MAX to choose);
    True when applied."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, n))


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Serve allocations of `nbytes` and more with their own mmap, returned to the kernel when freed (set
    MALLOC_MMAP_THRESHOLD_ to choose); True when applied."""
    libc = _libc()
    if libc is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, nbytes))


@contextlib.contextmanager
def update_heap() -> Iterator[None]:
    """Around an update: the rollout's freed buffers handed back, large buffers mmapped while it runs (its peak
    kept low), then its own freed pages handed back and the rollouts' threshold restored."""
    trim_heap()
    fix_mmap_threshold(MMAP_THRESHOLD)
    try:
        yield
    finally:
        fix_mmap_threshold(ROLLOUT_MMAP_THRESHOLD)
        trim_heap()


def tune_heap() -> None:
    """What `legorl train` sets before any thread allocates: two arenas (the mmap threshold is set around each
    update: `update_heap`)."""
    limit_arenas()


def trim_heap() -> bool:
    """Collect garbage, then return malloc's free pages to the kernel; True when memory was released."""
    gc.collect()
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def memory_metrics() -> dict[str, float]:
    """This process's resident memory now and its high-water mark so far (`perf/rss_gb`,
    `perf/peak_rss_gb`, GB), logged each step so a run shows which step or phase set its peak."""
    import resource

    out = {"perf/peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        out["perf/rss_gb"] = pages * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        pass
    return out
