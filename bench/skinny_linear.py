"""The embedded engine's few-row linears (`serving.decode_linear`): the C kernel against BLAS, side by side.

    .venv/bin/python bench/skinny_linear.py [--rows 1 4 8 14 16 32 64] [--reps 3] # the linears alone
    .venv/bin/python bench/skinny_linear.py --engine [--rows 14] [--rounds 2]       # whole decode steps

The first form runs SmolLM2-135M's linears (30 layers of q/k/v/o and gate/up/down, then the 49,152 x 576 head, with
random weights, 0.54 GB, so each weight comes from memory as in a decode step) at M rows on one thread, kernel and
BLAS alternating; it prints each one's ms for the whole set (the best of `--reps`), the ratio, and the largest
difference of their outputs. `--engine` measures the whole decode step of the real engine (one thread, the demo
replica's 10,240-token pool, decode attention in its kernel): `--rows` prompts of 200-450 random tokens prefilled,
then 64 tokens decoded in each at once, `serving.decode_linear` = torch, then kernel, alternating, each in a fresh
process, both through the HF modules (`lean_decode=False`: bench/lean_decode.py measures that loop); it prints ms an
engine step (the median over the steps) and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import torch
import torch.nn.functional as F
from _engine_step import compare_modes, engine_step_ms

from legorl.serving.embedded.skinny_linear import MAX_ROWS, skinny_linear

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # [out, in]


def linears_main(a) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=g) for _ in range(30) for n, k in SHAPES] + [torch.randn(49152, 576,
                                                                                                     generator=g)]
    print(f"SmolLM2-135M's linears ({sum(w.numel() for w in weights) * 4 / 1e9:.2f} GB of fp32 weights), 1 thread")
    for m in a.rows:
        if m > MAX_ROWS:
            raise SystemExit(f"--rows: at most {MAX_ROWS} (the engine takes the kernel up to there)")
        x = {k: torch.randn(m, k, generator=g) for k in (576, 1536)}
        best = {"blas": float("inf"), "kernel": float("inf")}
        with torch.no_grad():
            diff = max(float((skinny_linear(x[w.shape[1]], w) - F.linear(x[w.shape[1]], w)).abs().max())
                       for w in weights[:7] + weights[-1:])
            for _ in range(a.reps + 1):  # the first round warms up
                for name, fn in (("blas", F.linear), ("kernel", skinny_linear)):
                    t0 = time.perf_counter()
                    for w in weights:
                        fn(x[w.shape[1]], w)
                    best[name] = min(best[name], time.perf_counter() - t0)
        print(f"M = {m:>2}: BLAS {1e3 * best['blas']:6.1f} ms, kernel {1e3 * best['kernel']:6.1f} ms, "
              f"{best['blas'] / best['kernel']:.2f}x (max |diff| {diff:.1e})")


def engine_main(a) -> None:
    compare_modes(__file__, ["--rows", str(a.rows[0])], "linear_kernel", a.rounds,
                  f"engine, {a.rows[0]} rows decoding 64 tokens over prompts of 200-450 tokens, 1 thread")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=None, help="M (default 1 4 8 14 16 32 64; --engine: 14)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine", action="store_true", help="whole engine decode steps instead")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engine-child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.engine_child:
        res = engine_step_ms(a.rows[0], 200, 450, decode_linear=a.engine_child, lean_decode=False)
        print(json.dumps(asyncio.run(res)))
    elif a.engine:
        a.rows = a.rows or [14]
        engine_main(a)
    else:
        a.rows = a.rows or [1, 4, 8, 14, 16, 32, 64]
        linears_main(a)


if __name__ == "__main__":
    main()
