"""Sync vs one-step-off vs fully-async (+ partial rollout) on a long-tail agentic workload, side by side.

    .venv/bin/python bench/async.py [--model smollm2-135m-instruct] [--steps 4] [--batch 2] [--n 4]

The workload (`bench/_sleepy_scaffold.py`): each trial draws its tool latency L from a seeded lognormal
(median 2 s, p99 = 10 x median) and makes `--turns` real generations on the embedded engine, each
but the last followed by a sandbox command that takes L; the verifier scores a coin flip. The three
modes run the same config (batch, group size, `rollout.concurrency`, model) one after the other in
this process, each drawing the same seeded latencies in trial start order:

- sync: roll out a batch, wait for its slowest trial, update, push weights;
- one-step-off: batches start as a whole (`async_training.rollout_waves`), the next one while the
  trainer updates on the previous one (staleness 1, no partial rollout): verl's one-step-off pipeline;
- fully-async: trials stream under `rollout.concurrency`, a weight sync aborts and resumes
  generations (partial rollout), staleness bound `--staleness`; `fully-async/s2` is the same with bound 2
  (and, with `--concurrency 0`, the trials in flight that bound admits); a mode with `+proc` runs the
  engine in its own process (`serving.placement = "process"`: no GIL shared with the trainer).

Per mode: trained trials per hour (whole run, and after the first step), step time, trainer idle
(waiting for rollouts / loop time), engine idle (share of 0.1 s samples with no request running or
waiting), the staleness histogram of trained trials, stale drops. It also prints the speed-up the
workload allows: R = mean trial time, T = trainer time per step, tail = sync rollout time / R:
(R + T) / max(R, T) x tail (the issue's form) and (tail R + T) / max(R, T) (sync step over the ideal
overlapped step). Both assume the trainer and the engine do not share cores: here they share two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _sleepy_scaffold import lognormal_sigma, make_tasks, reset_streams

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
max_turns = {turns}
max_response_len = {tokens}
concurrency = {concurrency}
[agent]
name = "_sleepy_scaffold:SleepyScaffold"
kwargs = {{turns = {turns}, median_s = {median}, p99_factor = {p99}, seed = {seed}, stream = "bench"}}
[serving]
kv_budget_tokens = 16384
threads_per_replica = {threads}
placement = "{placement}"
[async_training]
enabled = {enabled}
{async_keys}
[algorithm]
n_resp_per_prompt = {n}
entropy_coef = 0.01
[trainer]
train_batch_size = {batch}
total_steps = {steps}
micro_batch_size = 4
lr = 1e-5
"""

MODES = {
    "sync": "",
    "one-step-off": "staleness_threshold = 1\npartial_rollout = false\nrollout_waves = true",
    "fully-async": "staleness_threshold = {staleness}\npartial_rollout = true",
}


class EngineIdle:
    """Samples the engines every 0.1 s: the share of samples where none has a request running or waiting."""

    def __init__(self) -> None:
        self.engines: list = []
        self.busy = self.total = 0
        self._task: asyncio.Task | None = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            if self.engines:
                stats = [e.stats() for e in self.engines]
                self.total += 1
                self.busy += any(s.running or s.waiting for s in stats)

    def start(self, engines) -> None:
        self.engines = list(engines)
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return 1.0 - self.busy / max(self.total, 1)


async def run_mode(mode: str, args: argparse.Namespace, tasks: Path, out: Path) -> dict:
    from legorl.config import load_config
    from legorl.models import prepare_model
    from legorl.train import loop

    kind, _, t = mode.partition("@")  # "sync@2": this mode with 2 engine (and, sync, trainer) threads
    threads = int(t) if t else args.threads
    kind, proc, _ = kind.partition("+proc")  # "fully-async+proc": the engine in its own process
    kind, _, s = kind.partition("/s")  # "fully-async/s2": this mode with staleness bound 2
    staleness = int(s) if s else args.staleness
    keys = MODES[kind].format(staleness=staleness)
    name = mode.replace("/", "-").replace("@", "-")  # a file and run name
    path = out / f"{name}.toml"
    path.write_text(CONFIG.format(
        mode=name, placement="process" if proc else "thread", out=out / "runs", model=prepare_model(args.model), tasks=tasks, turns=args.turns,
        tokens=args.tokens, concurrency=args.concurrency or (staleness + 1) * args.batch * args.n,
        median=args.median_s, p99=args.p99_factor, seed=args.seed, enabled=str(kind != "sync").lower(),
        async_keys=keys, n=args.n, batch=args.batch, steps=args.steps, threads=threads))
    cfg = load_config(path)
    reset_streams()  # every mode draws the same latencies, in trial start order
    idle = EngineIdle()
    lags: list[int] = []
    updates = [0]
    orig_start, orig_learn = loop.start_runtime, loop.learn

    async def start_runtime(cfg, run_dir):
        rt = await orig_start(cfg, run_dir)
        idle.start(rt.engines)
        return rt

    def learn(trainer, kept):
        if kind == "sync":  # the update runs on this thread; async sizes its own worker thread (loop.py)
            import torch

            torch.set_num_threads(threads)
        lags.extend(updates[0] - min(vs) for vs in (r.policy_versions() for r in kept) if vs)
        updates[0] += 1
        return orig_learn(trainer, kept)

    loop.start_runtime, loop.learn = start_runtime, learn
    try:
        hist = await loop.train(cfg, on_line=lambda line: print(f"  [{mode}] {line[:160]}", flush=True),
                                progress=False)
    finally:
        loop.start_runtime, loop.learn = orig_start, orig_learn
    engine_idle = await idle.stop()
    if kind == "sync":
        ends = list(_cumsum(h["timing/step_s"] for h in hist))
        trainer_idle = sum(h["timing/rollout_s"] for h in hist) / ends[-1]
    else:
        ends = [h["timing/wall_s"] for h in hist]
        trainer_idle = sum(h["fully_async/trainer/idle_s"] for h in hist) / ends[-1]
    per_step = args.batch * args.n
    timings = [json.loads(f.read_text()).get("timings", {}) for f in (out / "runs" / name).rglob("result.json")]
    train_s = [h.get("timing/update_s", 0.0) + h.get("timing/old_logprob_s", 0.0) + h.get("timing/weight_sync_s", 0.0)
               for h in hist]
    return {
        "trials_per_hour": len(hist) * per_step / ends[-1] * 3600,
        "after_first_per_hour": (len(hist) - 1) * per_step / max(ends[-1] - ends[0], 1e-9) * 3600,
        "step_s": ends[-1] / len(hist),
        "trainer_idle": trainer_idle,
        "engine_idle": engine_idle,
        "train_s_per_step": sum(train_s) / len(train_s),
        "rollout_s_per_step": sum(h.get("timing/rollout_s", 0.0) for h in hist) / len(hist),
        "trial_mean_s": sum(t.get("total", 0.0) for t in timings) / max(len(timings), 1),
        "trials_started": float(len(timings)),
        "dropped_stale": sum(h.get("trajectory_filter/dropped_stale", 0.0) for h in hist),
        "cancelled_groups": hist[-1].get("fully_async/rollouter/cancelled_stale_groups", 0.0),
        "partial_ratio": sum(h.get("fully_async/partial/partial_ratio", 0.0) for h in hist) / len(hist),
        "lags": lags,
        "concurrency": float(cfg.rollout.concurrency),
        "staleness_bound": float(staleness),
    }


def _cumsum(xs):
    total = 0.0
    for x in xs:
        total += x
        yield total


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2, help="tasks (groups) per step")
    ap.add_argument("--n", type=int, default=4, help="attempts per task")
    ap.add_argument("--turns", type=int, default=3, help="generations per trial (a tool call between two)")
    ap.add_argument("--tokens", type=int, default=6, help="max new tokens per generation")
    ap.add_argument("--staleness", type=int, default=1, help="fully-async staleness bound")
    ap.add_argument("--concurrency", type=int, default=0,
                    help="trials in flight, every mode; 0: (staleness + 1) x batch x n, what the mode's bound admits")
    ap.add_argument("--median-s", type=float, default=2.0)
    ap.add_argument("--p99-factor", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="engine torch threads (the trainer shares torch's pool: run with OMP_NUM_THREADS=1)")
    ap.add_argument("--modes", default="sync,one-step-off,fully-async")
    ap.add_argument("--keep", default="", help="write the runs (logs, trials) under this directory and keep them")
    args = ap.parse_args()
    modes = args.modes.split(",")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="legorl-bench-async-") as tmp:
        root = Path(args.keep or tmp)
        tasks = make_tasks(root / "tasks", 8)
        res = {m: await run_mode(m, args, tasks, root) for m in modes}
    print(f"\n{args.steps} steps x {args.batch} tasks x {args.n} attempts, {args.turns} turns x <= {args.tokens} "
          f"tokens, model {args.model}, concurrency {args.concurrency or '(staleness + 1) x batch x n'}, "
          f"engine threads {args.threads} (mode@N: N), "
          f"tool latency lognormal median {args.median_s:g} s sigma {lognormal_sigma(args.p99_factor):.3f} "
          f"(p99 {args.p99_factor:g}x median), seed {args.seed}, fully-async staleness {args.staleness}; "
          f"bench wall {time.perf_counter() - t0:.0f} s")
    keys = ("concurrency", "staleness_bound", "trials_per_hour", "after_first_per_hour", "step_s", "trainer_idle", "engine_idle", "train_s_per_step",
            "rollout_s_per_step", "trial_mean_s", "trials_started", "dropped_stale", "cancelled_groups", "partial_ratio")
    print(f"{'':22}" + "".join(f"{m:>14}" for m in modes))
    for k in keys:
        print(f"{k:22}" + "".join(f"{res[m][k]:14.2f}" for m in modes))
    print(f"{'staleness histogram':22}" + "".join(f"{_hist(res[m]['lags']):>14}" for m in modes))
    if modes[0].startswith("sync"):
        s = res[modes[0]]
        r, t = s["trial_mean_s"], s["train_s_per_step"]
        tail = s["rollout_s_per_step"] / max(r, 1e-9)
        print(f"workload limit: R={r:.1f} s (mean trial), T={t:.1f} s (train+sync per step), tail={tail:.2f} "
              f"(sync rollout / R): (R+T)/max(R,T) x tail = {(r + t) / max(r, t) * tail:.2f}x; "
              f"(tail R + T)/max(R,T) = {(tail * r + t) / max(r, t):.2f}x")
        for m in modes[1:]:
            a = res[m]
            print(f"{m} / {modes[0]} trials per hour: {a['trials_per_hour'] / s['trials_per_hour']:.2f}x "
                  f"(after the first step: {a['after_first_per_hour'] / s['after_first_per_hour']:.2f}x)")
    await _drain_leftovers()


async def _drain_leftovers() -> None:
    """Tasks a run left behind (a trial's cleanup that ignores its cancel) must not hang the bench's exit."""
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if not left:
        return
    print(f"{len(left)} task(s) left after the runs: "
          + ", ".join(sorted({getattr(t.get_coro(), "__qualname__", "?") for t in left})), file=sys.stderr)
    for t in left:
        t.cancel()
    _, pending = await asyncio.wait(left, timeout=15)
    if pending:
        print(f"{len(pending)} still running 15 s after cancel: exiting without waiting for them", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _hist(lags: list[int]) -> str:
    c = Counter(lags)
    return " ".join(f"{k}:{c[k]}" for k in sorted(c)) or "-"


if __name__ == "__main__":
    asyncio.run(main())
