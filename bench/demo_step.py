"""The demo's own training step, phase by phase, for several settings side by side in one run.

    .venv/bin/python bench/demo_step.py [--config examples/demo.toml] [--variants default,engine-process]
                                        [--burn 0] [--steps 1] [--set key=value ...] [--reference]
                                        [--base /tmp/engine-base] [--roofline]

Each variant runs `legorl train`'s `train()` for `--steps` step(s) of the config in a fresh process (so
imports and model loads are paid the same way), with validation off, and prints `timing/*` and the
time budget `budget/*` (docs/operations.md) of its last step. `--burn N` keeps N CPU-burning processes
running beside the step, the normal case in agent RL where sandboxes, tools and verifiers share the
cores with the engine.

A variant is a name from VARIANTS or overrides written `key=value[;key=value]` (e.g.
`--variants default,rollout.concurrency=32`).

`--reference` adds the engine alone, in a fresh process: the same engine settings (`serving`, threads,
`max_num_seqs` = `rollout.concurrency`), the step's first-turn prompts (the builtin scaffold's messages
for the first `train_batch_size` tasks x `n_resp_per_prompt`), the same sampling and concurrency, no
proxy, sandbox, verifier or trainer. Its `budget/engine/*` are the same counters, so a variant's decode
rate over the reference's says what running inside the step costs the engine.

`--base DIR` runs every variant a second time with the code of another checkout (a worktree of an older
commit: `git worktree add DIR <commit>`), alternating, and prints this / base for the step's phases.
`--roofline` runs bench/roofline.py's probe (the model's linears and a weight pass, with the engine's
thread count) in a fresh process and prints each variant's in-step engine rates as a share of it (decode
at B = rollout.concurrency; prefill against the GEMM peak).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "default": [],
    "engine-process": ["serving.placement=process"],
}

_CHILD = r"""
import asyncio, json, sys
from legorl.config import load_config
from legorl.train.loop import train
cfg = load_config(sys.argv[1], sys.argv[3:])
history = asyncio.run(train(cfg, overwrite=True, on_line=lambda _l: None, progress=False))
print("RESULT " + json.dumps(history[-1]))
"""

_REFERENCE = r"""
import asyncio, json, sys, time
from legorl.agents.builtin import BuiltinScaffold
from legorl.config import load_config
from legorl.models import prepare_model
from legorl.models.chat import chat_ids, load_tokenizer, stop_token_ids
from legorl.runtime.inprocess import engine_spec
from legorl.serving.launch import start_engines
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.tasks.split import load_task_split
from legorl.train.budget import engine_budget

async def main():
    cfg = load_config(sys.argv[1], sys.argv[3:])
    model = prepare_model(cfg.model.path)
    tok, sc, ro = load_tokenizer(model), BuiltinScaffold(**cfg.agent.kwargs), cfg.rollout
    train, _ = load_task_split(cfg.tasks)
    tasks = train[: cfg.trainer.train_batch_size]
    prompts = [chat_ids(tok, sc.first_messages(t.instruction))
               for t in tasks for _ in range(cfg.algorithm.n_resp_per_prompt)]
    [engine] = await start_engines(engine_spec(cfg, model))
    gate, stops = asyncio.Semaphore(max(ro.concurrency, 1)), stop_token_ids(tok)

    async def one(i, ids):
        async with gate:
            await engine.generate(GenerateRequest(ids, SamplingParams(
                temperature=ro.temperature, max_tokens=ro.max_response_len, seed=cfg.run.seed + i,
                stop_token_ids=stops)))

    await one(0, prompts[0])  # warm-up (and the shared prefix cached, as in a running step)
    before, t0 = [engine.stats()], time.perf_counter()
    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    wall = time.perf_counter() - t0
    out = engine_budget(before, [engine.stats()], wall)
    await engine.close()
    print("RESULT " + json.dumps({**out, "timing/rollout_s": wall}))

asyncio.run(main())
"""

KEYS = ("timing/step_s", "timing/rollout_s", "timing/old_logprob_s", "timing/update_s", "timing/weight_sync_s",
        "budget/engine/busy_share", "budget/engine/prefill_tok_s", "budget/engine/decode_tok_s",
        "budget/engine/decode_tokens", "budget/engine/rows_per_step", "budget/trial/sandbox_start_p50_s", "budget/trial/agent_p50_s",
        "budget/trial/agent_max_s", "budget/trial/verify_p50_s", "budget/trial/sandbox_stop_p50_s",
        "budget/loop_lag/mean_s", "budget/loop_lag/max_s", "rollout/pass_rate")


_PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
import roofline
from legorl.config import load_config
from legorl.models import prepare_model
from legorl.serving.launch import default_threads_per_replica
from transformers import AutoModelForCausalLM
cfg = load_config(sys.argv[1], [])
threads = cfg.serving.threads_per_replica or default_threads_per_replica(1)
model = AutoModelForCausalLM.from_pretrained(prepare_model(cfg.model.path)).eval()
print("RESULT " + json.dumps(roofline.probe(model, threads)))
"""


def _overrides(variant: str) -> list[str]:
    """A named variant's overrides, or the variant itself read as `key=value[;key=value...]`."""
    if variant in VARIANTS:
        return VARIANTS[variant]
    if "=" in variant:
        return variant.split(";")
    raise SystemExit(f"unknown variant {variant!r}: use one of {sorted(VARIANTS)} or key=value[;key=value]")


def _burn() -> None:
    while True:
        pass


def run_variant(config: str, overrides: list[str], steps: int, out_dir: str, child: str = _CHILD,
                src: str | None = None) -> dict:
    """`train()` for `steps` steps in a fresh process running `child` (with the code under `src` when
    given); its last step's metrics."""
    args = [f"trainer.total_steps={steps}", "trainer.test_freq=0", "trainer.val_before_train=false",
            f"run.output_dir={out_dir}", "run.name=bench", *overrides]
    env = {**os.environ, "PYTHONPATH": src} if src else None
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", child, config, "--", *args], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"variant {overrides} failed:\n{res.stderr[-3000:]}")
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "wall/process_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/demo.toml")
    ap.add_argument("--variants", default="default,engine-process")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--burn", type=int, default=0, help="CPU-burning processes beside the step")
    ap.add_argument("--set", action="append", default=[], help="key=value for every variant (repeatable)")
    ap.add_argument("--reference", action="store_true",
                    help="also run the step's first-turn generations on the engine alone (same settings)")
    ap.add_argument("--base", default="", help="another checkout: run every variant with its code too")
    ap.add_argument("--roofline", action="store_true", help="in-step engine rates as a share of the machine's limit")
    args = ap.parse_args()
    names = args.variants.split(",") + (["engine-alone"] if args.reference else [])
    if args.base:  # alternating: base first, then this checkout, per variant
        names = [m for n in names for m in (f"{n}@base", n)]
    base_src = str(Path(args.base).resolve() / "src") if args.base else None
    burners = [mp.Process(target=_burn, daemon=True) for _ in range(args.burn)]
    for b in burners:
        b.start()
    try:
        rows = {}
        for name in names:
            plain, _, at = name.partition("@")
            src = base_src if at else None
            with tempfile.TemporaryDirectory() as tmp:
                if plain == "engine-alone":
                    rows[name] = run_variant(args.config, args.set, args.steps, tmp, child=_REFERENCE, src=src)
                else:
                    rows[name] = run_variant(args.config, [*args.set, *_overrides(plain)], args.steps, tmp, src=src)
        if args.roofline:
            res = subprocess.run([sys.executable, "-c", _PROBE, args.config, str(Path(__file__).resolve().parent)],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"roofline probe failed:\n{res.stderr[-3000:]}")
            probe = json.loads(next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
            probe = {k: ({int(m): t for m, t in v.items()} if isinstance(v, dict) else v) for k, v in probe.items()}
    finally:
        for b in burners:
            b.kill()
    print(f"{args.config}: last of {args.steps} step(s), {args.burn} CPU burner(s) beside it")
    w = max(18, *(len(n) + 2 for n in names))
    print(f"{'metric':36}" + "".join(f"{n:>{w}}" for n in names))
    for key in (*KEYS, "wall/process_s"):
        vals = [rows[n].get(key) for n in names]
        print(f"{key:36}" + "".join(f"{v:>{w}.3f}" if isinstance(v, int | float) else f"{'-':>{w}}" for v in vals))
    if args.reference:
        ref = rows["engine-alone"].get("budget/engine/decode_tok_s") or float("nan")
        for n in names[:-1]:
            print(f"{n}: decode rate in the step / engine alone = {rows[n].get('budget/engine/decode_tok_s', 0) / ref:.2f}")
    if args.base:
        for n in names[1::2]:
            print(f"{n}: this / base " + ", ".join(
                f"{k.split('/')[-1]} {rows[n].get(k, float('nan')) / (rows[n + '@base'].get(k) or float('nan')):.2f}x"
                for k in ("timing/rollout_s", "timing/step_s", "budget/engine/prefill_tok_s",
                          "budget/engine/decode_tok_s")))
    if args.roofline:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import roofline

        from legorl.config import load_config

        b = load_config(args.config, args.set).rollout.concurrency
        lim_d, lim_p = roofline.decode_limit(probe, b), roofline.prefill_limit(probe, roofline.CHUNK)
        print(f"roofline ({probe['threads']} thread(s)): decode limit at B={b} {lim_d:.1f} tok/s, prefill limit "
              f"(GEMM peak) {lim_p:.1f} tok/s")
        for n in names:
            d, p = rows[n].get("budget/engine/decode_tok_s"), rows[n].get("budget/engine/prefill_tok_s")
            if d and p:
                print(f"{n}: in-step decode {d / lim_d:.1%} of the limit, prefill {p / lim_p:.1%}")


if __name__ == "__main__":
    main()
