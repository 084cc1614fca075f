"""Several LoRA adapters over one base on one embedded engine: decode cost by how the rows split, side by side.

    PYTHONPATH=src .venv/bin/python bench/lora_pool.py [--model smollm2-135m-instruct] [--rank 8]
                                                       [--requests 8 --tokens 32] [--reps 3]

One engine, one batch of `--requests` greedy decodes of `--tokens` each, per layout (all alternating, best of
`--reps`): the base alone; every row on the only adapter (merged into the weights); every row on one adapter
while a second is loaded (applied in the forward); rows split over 2 and over 4 adapters; half the rows on the
base. Prints `decode <layout>/base: N` lines and the engine's merged/forward step counts, so the choice in
serving/embedded/lora.py (merge when one adapter serves a whole step, else group rows per adapter in the
forward) can be checked on this machine.

    PYTHONPATH=src .venv/bin/python bench/lora_pool.py --runs [--runs-model tiny-llama] [--steps 2]

Instead: `legorl train` runs against one `legorl serve --engine-api` (in this process), LoRA on each: one run
alone, then two at once with different adapters. Prints each run's sampled tokens per rollout second and step
time, and `rollout tok/s per run shared/alone: N`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from legorl.config import load_config
from legorl.models import resolve_model
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams


def adapter(path, rank: int, seed: int) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    from legorl.train.lora import adapter_state, attach_lora

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    attach_lora(model, load_config(None, [f"model.lora.rank={rank}", f"model.lora.alpha={2 * rank}",
                                          "model.lora.init=gaussian"]).model.lora, seed=seed)
    return adapter_state(model)


async def decode(engine: EmbeddedEngine, names: list[str | None], tokens: int) -> float:
    reqs = [GenerateRequest(list(range(10 + i, 60 + i)), SamplingParams(temperature=0.0, max_tokens=tokens,
                                                                          ignore_eos=True), adapter=n)
            for i, n in enumerate(names)]
    t0 = time.perf_counter()
    await asyncio.gather(*(engine.generate(r) for r in reqs))
    return time.perf_counter() - t0


async def main(args) -> None:
    path = resolve_model(args.model)
    adapters = {f"a{i}": adapter(path, args.rank, i) for i in range(4)}
    n = args.requests
    layouts: dict[str, tuple[list[str], list[str | None]]] = {  # (adapters loaded, each row's adapter)
        "base": ([], [None] * n),
        "1 adapter merged": (["a0"], ["a0"] * n),
        "1 adapter in-forward": (["a0", "a1"], ["a0"] * n),
        "2 adapters": (["a0", "a1"], [f"a{i % 2}" for i in range(n)]),
        "4 adapters": (["a0", "a1", "a2", "a3"], [f"a{i % 4}" for i in range(n)]),
        "base + 1 adapter": (["a0", "a1"], [None if i % 2 else "a0" for i in range(n)]),
    }
    best = dict.fromkeys(layouts, float("inf"))
    counts = {}
    for rep in range(args.reps):
        for name, (loaded, rows) in layouts.items():  # a fresh engine per layout: only its adapters loaded
            engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=8192, num_threads=args.threads,
                                                    enable_prefix_caching=False)
            try:
                for a in loaded:
                    await engine.load_adapter(a, adapters[a], 1)
                await decode(engine, rows[:2], 2)  # warm-up (and, merged, the one merge)
                best[name] = min(best[name], await decode(engine, rows, args.tokens))
                c = engine._adapters.counters
                print(f"  {name}: {best[name]:.2f} s", flush=True)
                counts[name] = f"merged steps {c['merged_steps']}, in-forward steps {c['forward_steps']}"
            finally:
                await engine.close()
        print(f"rep {rep + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in best.items()), flush=True)
    for name in layouts:
        print(f"decode {name}/base: {best[name] / best['base']:.2f}  ({best[name]:.2f} s vs {best['base']:.2f} s for "
              f"{n} x {args.tokens} tokens; {counts[name]})")


async def shared_runs(args) -> None:
    import tomli_w

    from legorl.proxy.cli import run_server

    path = resolve_model(args.runs_model)
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(str(path), kv_budget_tokens=16384, ready=ready, stop=stop,
                                            engine_api=True))
    url = await asyncio.wait_for(ready, 300)
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "run.toml"
        cfg.write_text(tomli_w.dumps({
            "run": {"name": "x", "output_dir": f"{d}/runs"}, "model": {"path": str(path), "lora": {
                "rank": args.rank, "alpha": 2 * args.rank, "init": "gaussian"}},
            "tasks": {"train": "builtin:shell-basics", "val_fraction": 0.0},
            "rollout": {"max_turns": 1, "max_response_len": 32, "max_prompt_len": 1024, "concurrency": 4},
            "agent": {"name": "builtin"}, "serving": {"engine": "remote", "remote": {"url": url}},
            "algorithm": {"n_resp_per_prompt": 2}, "trainer": {"lr": 1e-3, "train_batch_size": 2,
                                                               "total_steps": args.steps, "save_freq": 0}}))

        async def train(names: list[str]) -> dict[str, dict[str, float]]:
            procs = {n: await asyncio.create_subprocess_exec(
                sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress", "--skip-preflight",
                f"run.name={n}", f"run.seed={i}", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
                for i, n in enumerate(names)}
            out = {}
            for n, p in procs.items():
                _, err = await p.communicate()
                if p.returncode:
                    raise SystemExit(f"run {n} failed: {err.decode()[-2000:]}")
                m = [json.loads(line) for line in (Path(d) / "runs" / n / "logs" / f"{n}.jsonl").read_text().splitlines()]
                tokens = sum(r["response_length/mean"] * 4 for r in m)
                out[n] = {"tok_s": tokens / sum(r["timing/rollout_s"] for r in m),
                          "step_s": sum(r["timing/step_s"] for r in m) / len(m),
                          "fidelity": max(r["rollout_corr/abs_diff_mean"] for r in m)}
                print(f"{'alone' if len(names) == 1 else 'shared'} run {n}: {out[n]['tok_s']:.1f} sampled tok/s in "
                      f"rollout, step {out[n]['step_s']:.1f} s, fidelity {out[n]['fidelity']:.1e}", flush=True)
            return out

        try:
            alone = (await train(["solo"]))["solo"]
            shared = await train(["a", "b"])
        finally:
            stop.set()
            await server
    for n, r in shared.items():
        print(f"rollout tok/s per run shared/alone ({n}): {r['tok_s'] / alone['tok_s']:.2f}  "
              f"(step {r['step_s']:.1f} s vs {alone['step_s']:.1f} s)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="engine threads (serving's default on 2 cores: 1)")
    p.add_argument("--runs", action="store_true", help="two legorl train runs sharing one server, vs one alone")
    p.add_argument("--runs-model", default="tiny-llama")
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    asyncio.run(shared_runs(a) if a.runs else main(a))
