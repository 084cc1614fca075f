"""The machine's limit for this model, and the embedded engine's prefill/decode rates as a share of it.

Used by `bench/engine.py --roofline` and `bench/demo_step.py --roofline`. With the engine's thread count:

- GEMM: every `nn.Linear` of the model (its own shapes, its own weights) applied to a batch of M rows, timed;
  FLOP/s at M. A decode step of B rows cannot beat the time of those linears at M = B (lm_head included);
  a prefill of n tokens cannot beat its linear FLOPs at the GEMM rate of M = min(n, 512) (lm_head for the
  last token only). Attention, norms, sampling and Python are all counted against the engine.
- Memory: one pass over the weights (GB/s); a decode step cannot beat reading every weight once.

The engine is measured the same way whatever its internals: a cold prefill of B prompts (max_tokens=1), then
the same prompts warm (prefix-cached) for 1 and for 1 + n tokens; decode rate = B*n / (t(1+n) - t(1)).

Every time is taken twice: wall clock, and this process's CPU time. On a quiet machine they agree; on a
machine shared with other work (the usual case here) wall-clock rates swing with the neighbours while the
CPU-time shares still say how well the engine uses the core it gets, against a probe timed the same way.
"""

from __future__ import annotations

import asyncio
import random
import time

import torch

CHUNK = 512  # prefill GEMM rows the limit assumes (the engine's default prefill chunk)


def _linears(model) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    body, head = [], None
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            if m is out_emb:
                head = m.weight
            else:
                body.append(m.weight)
    return body, head


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def _best(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = _clock()
        fn()
        best = min(best, _clock() - t0)
    return best


@torch.no_grad()
def probe(model, threads: int, ms: tuple[int, ...] = (1, 4, 16, 32, 128, CHUNK), clock: str = "wall") -> dict:
    """Time the model's linears at each batch M and one pass over its weights (best of a few)."""
    global _clock
    _clock = CLOCKS[clock]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        body, head = _linears(model)
        ws = body + ([head] if head is not None else [])
        params = sum(w.numel() for w in body)
        head_params = head.numel() if head is not None else 0
        nbytes = sum(w.numel() * w.element_size() for w in ws)
        t_mem = _best(lambda: [w.sum() for w in ws], 3)
        t_lin, t_body = {}, {}
        for m in ms:
            xs = {w.shape[1]: torch.randn(m, w.shape[1], dtype=w.dtype) for w in ws}
            reps = 5 if m <= 32 else 2
            t_body[m] = _best(lambda xs=xs: [torch.nn.functional.linear(xs[w.shape[1]], w) for w in body], reps)
            t_head = _best(lambda xs=xs: torch.nn.functional.linear(xs[head.shape[1]], head), reps) if head is not None else 0
            t_lin[m] = t_body[m] + t_head
        t_head1 = t_lin[1] - t_body[1]
        return {"threads": threads, "params": params, "head_params": head_params, "weight_bytes": nbytes,
                "gbps": nbytes / t_mem / 1e9, "t_lin": t_lin, "t_body": t_body, "t_head1": t_head1,
                "gflops": {m: 2 * m * (params + head_params) / t / 1e9 for m, t in t_lin.items()},
                "gemm_peak_gflops": 2 * CHUNK * params / t_body[CHUNK] / 1e9}
    finally:
        torch.set_num_threads(before)


def best_of(a: dict, b: dict) -> dict:
    """The faster of two probes per measurement (taken before and after the engine on a noisy machine:
    the limit is the machine's best, so shares err low)."""
    out = dict(a)
    out["gbps"] = max(a["gbps"], b["gbps"])
    for key in ("t_lin", "t_body"):
        out[key] = {m: min(a[key][m], b[key][m]) for m in a[key]}
    out["t_head1"] = min(a["t_head1"], b["t_head1"])
    out["gflops"] = {m: 2 * m * (a["params"] + a["head_params"]) / t / 1e9 for m, t in out["t_lin"].items()}
    out["gemm_peak_gflops"] = 2 * CHUNK * a["params"] / out["t_body"][CHUNK] / 1e9
    return out


def decode_limit(p: dict, b: int) -> float:
    """Tokens/s the machine allows a decode step of b rows (linears at M = b, or one weight pass)."""
    t_lin = p["t_lin"].get(b)
    if t_lin is None:  # between measured M: the FLOP rate of the nearest measured M at or above b
        m = min((m for m in p["t_lin"] if m >= b), default=max(p["t_lin"]))
        t_lin = 2 * b * (p["params"] + p["head_params"]) / (p["gflops"][m] * 1e9)
    return b / max(t_lin, p["weight_bytes"] / (p["gbps"] * 1e9))


def prefill_limit(p: dict, n_tokens: int, n_prompts: int = 1) -> float:
    """Tokens/s the machine allows prefilling n_tokens (in n_prompts prompts): linear FLOPs at the GEMM
    rate of M = min(n_tokens, 512) rows, plus one lm_head row per prompt."""
    m = min((m for m in p["t_body"] if m >= min(n_tokens, CHUNK)), default=CHUNK)
    rate = 2 * m * p["params"] / p["t_body"][m]  # FLOP/s
    return n_tokens / (2 * n_tokens * p["params"] / rate + n_prompts * p["t_head1"])


def _prompts(rng: random.Random, vocab: int, n: int, length: int) -> list[list[int]]:
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(n)]


async def _timed(engine, prompts: list[list[int]], max_tokens: int) -> dict[str, float]:
    from legorl.serving.types import GenerateRequest, SamplingParams

    t0 = {k: c() for k, c in CLOCKS.items()}
    outs = await asyncio.gather(*[
        engine.generate(GenerateRequest(p, SamplingParams(temperature=0.8, max_tokens=max_tokens, seed=i,
                                                          ignore_eos=True)))
        for i, p in enumerate(prompts)
    ])
    assert all(len(o.token_ids) == max_tokens for o in outs)
    return {k: c() - t0[k] for k, c in CLOCKS.items()}


async def engine_rates(engine, vocab: int, batches=(1, 4, 16, 32), prompt_len: int = 128, new_tokens: int = 32,
                       long_prompt: int = 512, seed: int = 0) -> dict:
    """Prefill and decode tokens/s of `engine` at each batch size (see the module docstring), by clock:
    {"wall": {...}, "cpu": {...}}."""
    rng = random.Random(seed)
    await _timed(engine, _prompts(rng, vocab, 1, 16), 2)  # warm-up
    out: dict = {k: {"prefill": {}, "decode": {}} for k in CLOCKS}
    for b in batches:
        ps = _prompts(rng, vocab, b, prompt_len)
        t0 = await _timed(engine, ps, 1)
        t1 = await _timed(engine, ps, 1)
        t2 = await _timed(engine, ps, 1 + new_tokens)
        for k in CLOCKS:
            out[k]["prefill"][b] = b * prompt_len / t0[k]
            out[k]["decode"][b] = b * new_tokens / max(t2[k] - t1[k], 1e-9)
    runs = [await _timed(engine, _prompts(rng, vocab, 1, long_prompt), 1) for _ in range(2)]
    for k in CLOCKS:
        out[k]["prefill_long"] = long_prompt / min(r[k] for r in runs)
    return out


def report(p: dict, rates: dict, prompt_len: int = 128, long_prompt: int = 512) -> dict:
    """Print the probe and the engine's shares; returns the shares."""
    print(f"roofline probe ({p['threads']} thread(s)): weights {p['weight_bytes'] / 1e6:.0f} MB, one pass "
          f"{p['gbps']:.1f} GB/s; linears " + ", ".join(f"M={m} {g:.1f}" for m, g in p["gflops"].items())
          + f" GFLOP/s; GEMM peak (M={CHUNK}) {p['gemm_peak_gflops']:.1f} GFLOP/s")
    shares: dict = {}
    for b in rates["decode"]:
        lim_d, lim_p = decode_limit(p, b), prefill_limit(p, b * prompt_len, b)
        d, f = rates["decode"][b], rates["prefill"][b]
        shares[f"decode/{b}"], shares[f"prefill/{b}"] = d / lim_d, f / lim_p
        print(f"B={b:>2}: decode {d:7.1f} tok/s of {lim_d:7.1f} ({d / lim_d:5.1%}); prefill {b}x{prompt_len} "
              f"{f:7.1f} tok/s of {lim_p:7.1f} ({f / lim_p:5.1%})")
    lim = prefill_limit(p, long_prompt)
    shares["prefill/long"] = rates["prefill_long"] / lim
    print(f"prefill 1x{long_prompt}: {rates['prefill_long']:7.1f} tok/s of {lim:7.1f} ({shares['prefill/long']:5.1%})")
    return shares
