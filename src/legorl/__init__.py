"""legorl: online RL for LLM coding agents."""

import os as _os

# torch's OpenMP (libgomp) threads spin ~300,000 times at every barrier before they sleep. On a machine whose
# cores are shared with sandboxes, verifiers and the engine, a spinning team burns the time of whoever holds
# the core: one SmolLM2 update with two CPU-burning processes beside it took 61.5 s with the default and 31.8 s
# with 2,000 spins, 15.4 vs 14.2 s on a quiet machine (2 threads, 2 cores, 2026-12-01, docs/operations.md).
# Read when torch loads libgomp, so only a process that imports legorl first (the CLI, ranks, Ray actors) gets
# it; child processes inherit it. Set GOMP_SPINCOUNT yourself to override.
_os.environ.setdefault("GOMP_SPINCOUNT", "2000")

__version__ = "0.1.0"
