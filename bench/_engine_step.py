"""The embedded engine's decode step timed on SmolLM2-135M (shared by bench/decode_attention.py --engine and
bench/skinny_linear.py): one fresh one-thread engine with a 10,240-token pool (a demo replica's) prefills `rows`
prompts of random tokens, then decodes 64 tokens in each at once."""

from __future__ import annotations

import asyncio
import random
import statistics
import time


async def engine_step_ms(rows: int, min_len: int, max_len: int, **engine_kwargs) -> dict:
    """The median ms of the decode steps, and which C paths the engine took (`engine_kwargs` pick them)."""
    from legorl.models import resolve_model
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.types import GenerateRequest, SamplingParams

    eng = EmbeddedEngine.from_pretrained(resolve_model("smollm2-135m-instruct"), kv_budget_tokens=10240,
                                         num_threads=1, **engine_kwargs)
    rng = random.Random(0)
    prompts = [[rng.randint(100, 40000) for _ in range(rng.randint(min_len, max_len))] for _ in range(rows)]
    times: list[float] = []
    step = eng.runner.step

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = step(*args, **kwargs)
        times.append(time.perf_counter() - t0)
        return out

    try:
        await asyncio.gather(*[eng.generate(GenerateRequest(p, SamplingParams(1.0, max_tokens=1, seed=i)))
                               for i, p in enumerate(prompts)])  # the prompts' KV is cached now
        eng.runner.step = timed
        sp = [SamplingParams(1.0, max_tokens=64, seed=i, ignore_eos=True) for i in range(rows)]
        await asyncio.gather(*[eng.generate(GenerateRequest(p, s)) for p, s in zip(prompts, sp, strict=True)])
    finally:
        await eng.close()
    decode = times[2:]  # the first steps compute the prompts' last tokens
    return {"decode_kernel": eng.decode_kernel, "linear_kernel": eng.linear_kernel,
            "lean_steps": eng.runner.lean_steps, "step_ms": 1e3 * statistics.median(decode)}


def compare_modes(script: str, child_args: list[str], path_key: str, rounds: int, what: str) -> None:
    """Alternate `torch` and `kernel` for `rounds`, each in a fresh process (`script --engine-child MODE
    *child_args`, which prints `engine_step_ms`'s dict as its last line; `path_key` says which C path it took), then
    print each mode's best median step and the kernel's speed-up."""
    import json
    import subprocess
    import sys

    runs: dict[str, list[float]] = {"torch": [], "kernel": []}
    for _ in range(rounds):
        for mode in runs:
            cmd = [sys.executable, script, "--engine-child", mode, *child_args]
            res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            if res[path_key] != (mode == "kernel"):
                raise SystemExit(f"{mode}: the engine did not take that path ({res})")
            runs[mode].append(res["step_ms"])
    print(what)
    for mode, ms in runs.items():
        print(f"{mode:>6}: {min(ms):.1f} ms an engine step (median of its steps; rounds: "
              f"{', '.join(f'{x:.1f}' for x in ms)})")
    print(f"kernel speed-up of the decode step (best of {rounds} each): {min(runs['torch']) / min(runs['kernel']):.2f}x")
