"""Keep the engine thread's OpenMP team fast when another thread also ran torch ops (GNU libgomp).

libgomp keeps one worker pool per thread that ever started a parallel region, and counts every
pooled worker process-wide. Once that count exceeds the CPUs it may use, *every* team stops spinning
between parallel regions and sleeps on a futex instead (its "throttled" spin count, 100 spins, which
neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT changes). A decode step runs thousands of tiny parallel
regions, so the engine thread's forwards lost most of their intra-op speed-up as soon as the main
thread had run one torch op (loading or probing the model is enough): on 2 cores a 1x576 @ 576x1536
linear took 0.04 ms on the main thread and 0.12 ms on the engine thread.

`release_idle_workers()` frees the *calling* thread's idle pool (`omp_pause_resource_all`, OpenMP
5.0), which brings the count back down; that thread's next parallel region simply starts a new pool.
The engine calls it from the threads that construct it and call into it (usually the main thread).
It is a no-op without libgomp, on a thread without a pool, or inside a parallel region.
"""

from __future__ import annotations

import ctypes
import functools
import os


@functools.cache
def _pause_fn():
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    for path in sorted(paths):
        if not os.path.exists(path):
            continue
        try:
            fn = ctypes.CDLL(path).omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        return fn
    return None


def release_idle_workers() -> bool:
    """Free this thread's idle libgomp worker pool; True if libgomp accepted the request."""
    fn = _pause_fn()
    return fn is not None and fn(1) == 0  # 1 = omp_pause_soft
