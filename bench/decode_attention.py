"""Decode attention over the paged KV pool: the C kernel against the torch gather path, side by side.

    .venv/bin/python bench/decode_attention.py [--rows 14] [--min-len 150] [--max-len 550] [--threads 1]
    .venv/bin/python bench/decode_attention.py --engine [--rows 14] [--min-len 200] [--max-len 450] [--rounds 2]

SmolLM2-135M's attention shape (9 query heads over 3 KV heads of 64, 30 layers) and a 10,240-token pool (the
agent demo's per-replica budget, 0.47 GB of K/V) whose blocks are handed out in shuffled order; `--rows` decode
rows with context lengths drawn from [--min-len, --max-len]. A "step" runs the 30 layers in turn, as the engine
does, so each layer's K/V comes from memory, not from a cache the previous call warmed. Both paths run
alternately in this process; it prints each one's time a step, their ratio, and the largest difference of their
outputs.

`--engine` measures the whole decode step instead: the real engine (SmolLM2-135M, one thread, a 10,240-token
pool, `serving.decode_attention` = torch, then kernel, alternating, each in a fresh process) first prefills
`--rows` prompts of random tokens (lengths in [--min-len, --max-len]), then decodes 64 tokens in each at once;
it prints ms an engine step (the median over the steps) and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import torch
from _engine_step import compare_modes, engine_step_ms

from legorl.serving.embedded.decode_kernel import load
from legorl.serving.embedded.paged import StepBatch, active, paged_attention


class _Attn:
    """What paged_attention reads off an HF attention module."""

    config = None

    def __init__(self, layer_idx: int):
        self.layer_idx = layer_idx


def engine_main(a) -> None:
    compare_modes(__file__, ["--rows", str(a.rows), "--min-len", str(a.min_len), "--max-len", str(a.max_len)],
                  "decode_kernel", a.rounds,
                  f"engine, {a.rows} rows decoding 64 tokens over prompts of {a.min_len}-{a.max_len} tokens, 1 thread")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=14)
    ap.add_argument("--min-len", type=int, default=None, help="shortest context (150; --engine: 200)")
    ap.add_argument("--max-len", type=int, default=None, help="longest context (550; --engine: 450)")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads, and the kernel's")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=None, help="alternations of the two paths (3; --engine: 2)")
    ap.add_argument("--engine", action="store_true", help="time the whole engine step (see above)")
    ap.add_argument("--engine-child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.min_len = a.min_len or (200 if a.engine or a.engine_child else 150)
    a.max_len = a.max_len or (450 if a.engine or a.engine_child else 550)
    a.rounds = a.rounds or (2 if a.engine else 3)
    if a.engine_child:
        torch.set_num_threads(1)
        # the linears as in every run before serving.decode_linear (BLAS), so only the attention differs
        print(json.dumps(asyncio.run(engine_step_ms(a.rows, a.min_len, a.max_len, decode_attention=a.engine_child,
                                                    decode_linear="torch"))))
        return
    if a.engine:
        engine_main(a)
        return
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rng = random.Random(0)
    heads, kvh, d, bs, budget = 9, 3, 64, 16, 10240
    nblocks = budget // bs
    layers = 30
    k = torch.empty(layers, kvh, (nblocks + 1) * bs, d).normal_()
    v = torch.empty(layers, kvh, (nblocks + 1) * bs, d).normal_()
    lens = [rng.randint(a.min_len, a.max_len) for _ in range(a.rows)]
    order = list(range(nblocks))
    rng.shuffle(order)
    tables, at = [], 0
    for n in lens:
        tables.append(order[at: at + -(-n // bs)])
        at += len(tables[-1])
    if at > nblocks:
        raise SystemExit(f"{sum(lens)} tokens do not fit the {budget}-token pool: fewer --rows or a lower --max-len")
    width = max(map(len, tables))
    table = torch.full((a.rows, width), nblocks, dtype=torch.long)
    for i, t in enumerate(tables):
        table[i, : len(t)] = torch.tensor(t)
    lens_t = torch.tensor(lens)
    visible = torch.arange(width * bs)[None, :] < lens_t[:, None]
    mask = torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))[None, :, None, :]
    query = torch.randn(1, a.rows, heads, d).transpose(1, 2)  # [1, heads, rows, d], as HF hands it over
    slots = table[:, 0] * bs
    new_k = [k[i, :, slots][None] for i in range(layers)]  # rewrite slots that already hold these values
    new_v = [v[i, :, slots][None] for i in range(layers)]
    attn = [_Attn(i) for i in range(layers)]
    torch_step = StepBatch(k, v, bs, slots, n_dec=a.rows, dec_blocks=table.reshape(-1), dec_mask=mask)
    kernel_step = StepBatch(k, v, bs, slots, n_dec=a.rows, dec_tables=table, dec_lens=lens_t, dec_threads=a.threads)
    load()

    def run(step: StepBatch) -> torch.Tensor:
        with active(step):
            return torch.stack([paged_attention(attn[i], query, new_k[i], new_v[i], None)[0] for i in range(layers)])

    diff = (run(torch_step) - run(kernel_step)).abs().max().item()
    times: dict[str, list[float]] = {"torch": [], "kernel": []}
    for _ in range(a.rounds):
        for name, step in (("torch", torch_step), ("kernel", kernel_step)):
            for _ in range(3):
                run(step)
            t0 = time.perf_counter()
            for _ in range(a.reps):
                run(step)
            times[name].append((time.perf_counter() - t0) / a.reps)
    print(f"{a.rows} decode rows, context {min(lens)}-{max(lens)} ({sum(lens)} tokens), pool {budget} tokens, "
          f"torch threads {a.threads}")
    for name, ts in times.items():
        best = min(ts)
        print(f"{name:>6}: {best * 1e3:.1f} ms a 30-layer step (rounds: {', '.join(f'{t * 1e3:.1f}' for t in ts)})")
    print(f"kernel speed-up (best of {a.rounds} rounds each): {min(times['torch']) / min(times['kernel']):.2f}x; "
          f"largest |difference| {diff:.2e}")


if __name__ == "__main__":
    main()
