"""Sandbox latency: local bubblewrap start -> first exec (`true`) -> stop, against a plain subprocess.

    .venv/bin/python bench/sandbox.py [--runs 50]

Goal: local sandbox start p50 under 50 ms. Prints p50/p95 per phase and the ratio to a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from legorl.env.local import LocalSandbox
from legorl.tasks.model import Task


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def bench_sandbox(task: Task, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"start": [], "first exec": [], "stop": [], "total": []}
    for _ in range(runs):
        t0 = time.perf_counter()
        sb = LocalSandbox(task)
        await sb.start()
        t1 = time.perf_counter()
        r = await sb.exec("true")
        t2 = time.perf_counter()
        await sb.stop()
        t3 = time.perf_counter()
        assert r.exit_code == 0, r
        for k, v in zip(out, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
            out[k].append(v * 1000)
    return out


async def bench_subprocess(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = await asyncio.create_subprocess_exec("true")
        await p.wait()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        env = Path(d) / "environment"
        env.mkdir()
        for i in range(5):
            (env / f"file{i}.py").write_text("print('x')\n" * 50)
        task = Task(id="bench", path=Path(d), instruction="")
        await bench_sandbox(task, 3)  # warm-up: imports, page cache, cgroup detection
        sb = await bench_sandbox(task, args.runs)
        sp = await bench_subprocess(args.runs)
    print(f"sandbox latency over {args.runs} runs (ms), local bubblewrap backend")
    print(f"{'phase':<28}{'p50':>9}{'p95':>9}")
    for k, xs in sb.items():
        print(f"{'sandbox ' + k:<28}{pct(xs, 0.5):>9.1f}{pct(xs, 0.95):>9.1f}")
    print(f"{'plain subprocess `true`':<28}{pct(sp, 0.5):>9.1f}{pct(sp, 0.95):>9.1f}")
    ratio50 = pct(sb["total"], 0.5) / pct(sp, 0.5)
    ratio95 = pct(sb["total"], 0.95) / pct(sp, 0.95)
    print(f"{'ratio total / subprocess':<28}{ratio50:>8.1f}x{ratio95:>8.1f}x")
    goal = pct(sb["start"], 0.5) < 50
    print(
        f"goal start p50 < 50 ms: {'met' if goal else 'MISSED'} (mean start {statistics.mean(sb['start']):.1f} ms)"
    )


if __name__ == "__main__":
    asyncio.run(main())
