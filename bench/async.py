"""Sync vs fully-async training on tasks whose tools and verifier take real time.

    .venv/bin/python bench/async.py [--steps 5] [--model tiny-llama] [--staleness 1]

Tasks are made in a temp dir: each `tests/test.sh` sleeps 1-3 s and scores a coin flip (mixed GRPO
groups); the scaffold (`bench/_sleepy_scaffold.py`) makes two model calls, each followed by a
sandbox command that sleeps 0.3-1.5 s (`--long-s` 5 s with probability `--p-long` 0.15). Both modes run the same config
(batch, group size, concurrency) one after the other in this process and report trials trained per
hour (over the whole run, and after the first batch, which both modes wait for in full) and the
trainer's idle ratio (time waiting for rollouts / loop time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 1 + 2 * r / 32767 }')"
echo $((RANDOM % 2)) > /logs/verifier/reward.txt
"""

TASK_TOML = """schema_version = "1.4"
[verifier]
timeout_sec = 30.0
[agent]
timeout_sec = 120.0
[environment]
workdir = "/app"
"""

CONFIG = """
[run]
name = "{mode}"
output_dir = "{out}"
[model]
path = "{model}"
[tasks]
train = "{tasks}"
val_fraction = 0.0
[rollout]
max_turns = 2
max_response_len = 16
concurrency = {concurrency}
[agent]
name = "_sleepy_scaffold:SleepyScaffold"
kwargs = {{long_s = {long_s}, p_long = {p_long}}}
[serving]
kv_budget_tokens = 8192
[async_training]
enabled = {enabled}
{async_keys}
[algorithm]
n_resp_per_prompt = {n}
entropy_coef = 0.01
[trainer]
train_batch_size = {batch}
total_steps = {steps}
lr = 1e-4
"""


def make_tasks(root: Path, count: int) -> Path:
    for i in range(count):
        d = root / f"sleepy-{i}"
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "environment" / "README").write_text("nothing to do\n")
        (d / "task.toml").write_text(TASK_TOML)
        (d / "instruction.md").write_text(f"Task {i}: print the numbers 1 to {i + 3}.\n")
        (d / "tests" / "test.sh").write_text(TEST_SH)
        (d / "tests" / "test.sh").chmod(0o755)
    return root


async def run_mode(mode: str, args: argparse.Namespace, tasks: Path, out: Path) -> dict[str, float]:
    from legorl.config import load_config
    from legorl.models import prepare_model
    from legorl.train.loop import train

    keys = f"staleness_threshold = {args.staleness}" if mode == "async" else ""
    path = out / f"{mode}.toml"
    path.write_text(CONFIG.format(mode=mode, out=out / "runs", model=prepare_model(args.model), tasks=tasks,
                                  concurrency=args.batch * args.n, async_keys=keys,
                                  enabled=str(mode == "async").lower(), n=args.n, batch=args.batch,
                                  steps=args.steps, long_s=args.long_s, p_long=args.p_long))
    cfg = load_config(path)
    t0 = time.perf_counter()
    hist = await train(cfg, on_line=lambda line: print(f"  [{mode}] {line[:150]}"), progress=False)
    total = time.perf_counter() - t0
    if mode == "sync":
        wall = sum(h["timing/step_s"] for h in hist)
        idle = sum(h["timing/rollout_s"] for h in hist)
        after_first = wall - hist[0]["timing/step_s"]
    else:
        wall = hist[-1]["timing/wall_s"]
        idle = sum(h["fully_async/trainer/idle_s"] for h in hist)
        after_first = wall - hist[0]["timing/wall_s"]
    trained = args.steps * args.batch * args.n
    timings = [json.loads(f.read_text()).get("timings", {}) for f in (out / "runs" / mode).rglob("result.json")]
    mean = {k: sum(t.get(k, 0.0) for t in timings) / max(len(timings), 1)
            for k in ("total", "sandbox_start", "agent", "verify")}
    steady = (args.steps - 1) * args.batch * args.n / max(after_first, 1e-9) * 3600  # without the first batch
    return {"wall_s": wall, "total_s": total, "trials_per_hour": trained / wall * 3600, "idle_ratio": idle / wall,
            "steady_trials_per_hour": steady,
            "dropped_stale": sum(h.get("trajectory_filter/dropped_stale", 0.0) for h in hist),
            "staleness_mean": sum(h.get("fully_async/staleness/mean", 0.0) for h in hist) / len(hist),
            "partial_ratio": sum(h.get("fully_async/partial/partial_ratio", 0.0) for h in hist) / len(hist),
            "trials_run": float(len(timings)), **{f"trial_{k}_s": v for k, v in mean.items()},
            "train_s": sum(h.get("timing/update_s", 0.0) + h.get("timing/old_logprob_s", 0.0) for h in hist)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2, help="tasks (groups) per step")
    ap.add_argument("--n", type=int, default=4, help="attempts per task")
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--long-s", type=float, default=5.0, help="a slow tool call's sleep")
    ap.add_argument("--p-long", type=float, default=0.15, help="chance that a tool call is slow")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="legorl-bench-async-") as tmp:
        root = Path(tmp)
        tasks = make_tasks(root / "tasks", 6)
        res = {m: await run_mode(m, args, tasks, root) for m in ("sync", "async")}
    s, a = res["sync"], res["async"]
    print(f"\n{args.steps} steps x {args.batch} tasks x {args.n} attempts, concurrency {args.batch * args.n}, "
          f"model {args.model}, async staleness_threshold={args.staleness}, slow tool call {args.long_s:g} s "
          f"with p={args.p_long:g}")
    print(f"{'':16}{'sync':>12}{'async':>12}")
    for k in ("wall_s", "trials_per_hour", "steady_trials_per_hour", "idle_ratio", "train_s", "staleness_mean", "partial_ratio",
              "dropped_stale", "trials_run", "trial_total_s", "trial_sandbox_start_s", "trial_agent_s",
              "trial_verify_s"):
        print(f"{k:16}{s[k]:12.2f}{a[k]:12.2f}")
    print(f"async / sync trials per hour: {a['trials_per_hour'] / s['trials_per_hour']:.2f}x "
          f"(after the first batch: {a['steady_trials_per_hour'] / s['steady_trials_per_hour']:.2f}x)")


if __name__ == "__main__":
    asyncio.run(main())
