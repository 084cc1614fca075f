"""The demo's own training step, phase by phase, for several settings side by side in one run.

    .venv/bin/python bench/demo_step.py [--config examples/demo.toml] [--variants default,engine-process]
                                        [--burn 0] [--steps 1] [--set key=value ...]

Each variant runs `legorl train`'s `train()` for `--steps` step(s) of the config in a fresh process (so
imports and model loads are paid the same way), with validation off, and prints `timing/*` and the
time budget `budget/*` (docs/operations.md) of its last step. `--burn N` keeps N CPU-burning processes
running beside the step, the normal case in agent RL where sandboxes, tools and verifiers share the
cores with the engine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time

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

KEYS = ("timing/step_s", "timing/rollout_s", "timing/old_logprob_s", "timing/update_s", "timing/weight_sync_s",
        "budget/engine/busy_share", "budget/engine/prefill_tok_s", "budget/engine/decode_tok_s",
        "budget/engine/decode_tokens", "budget/trial/sandbox_start_p50_s", "budget/trial/agent_p50_s",
        "budget/trial/agent_max_s", "budget/trial/verify_p50_s", "budget/trial/sandbox_stop_p50_s",
        "budget/loop_lag/mean_s", "budget/loop_lag/max_s", "rollout/pass_rate")


def _burn() -> None:
    while True:
        pass


def run_variant(config: str, overrides: list[str], steps: int, out_dir: str, child: str = _CHILD) -> dict:
    """`train()` for `steps` steps in a fresh process running `child`; its last step's metrics."""
    args = [f"trainer.total_steps={steps}", "trainer.test_freq=0", "trainer.val_before_train=false",
            f"run.output_dir={out_dir}", "run.name=bench", *overrides]
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", child, config, "--", *args], capture_output=True, text=True)
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
    args = ap.parse_args()
    names = args.variants.split(",")
    burners = [mp.Process(target=_burn, daemon=True) for _ in range(args.burn)]
    for b in burners:
        b.start()
    try:
        rows = {}
        for name in names:
            with tempfile.TemporaryDirectory() as tmp:
                rows[name] = run_variant(args.config, [*args.set, *VARIANTS[name]], args.steps, tmp)
    finally:
        for b in burners:
            b.kill()
    print(f"{args.config}: last of {args.steps} step(s), {args.burn} CPU burner(s) beside it")
    print(f"{'metric':36}" + "".join(f"{n:>18}" for n in names))
    for key in (*KEYS, "wall/process_s"):
        vals = [rows[n].get(key) for n in names]
        print(f"{key:36}" + "".join(f"{v:>18.3f}" if isinstance(v, int | float) else f"{'-':>18}" for v in vals))


if __name__ == "__main__":
    main()
