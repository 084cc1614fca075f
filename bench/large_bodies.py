"""Server memory and event-loop lag while `legorl serve` takes large request bodies.

    .venv/bin/python bench/large_bodies.py [--model smollm2-135m-instruct] [--mb 10] [-n 3] [--concurrency 1]
        [--shape history|single] [--src DIR ...]

Starts `legorl serve` (embedded engine) as a child process, then sends `-n` OpenAI chat bodies of
`--mb` MB each (`history`: an agent-like conversation of 2 KB turns; `single`: one huge user message),
`--concurrency` at a time, while a probe calls GET /health every 20 ms. Prints the server's RSS before
and after (and its peak, VmHWM), the status and time of each large call, and the /health latency during
them (the event-loop lag every other session sees). `--src` runs the same against other source trees
(e.g. a `git worktree` of an older commit) for a side-by-side table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def make_body(mb: float, shape: str, seed: int) -> bytes:
    words = [f"w{(seed * 7919 + i * 104729) % 50021}" for i in range(4096)]
    turn = " ".join(words)[:2000]
    if shape == "single":
        n = int(mb * 1e6) // (len(turn) + 1)
        msgs = [{"role": "user", "content": "\n".join([turn] * n)}]
    else:
        msgs = [{"role": "system", "content": "You are a coding agent."}]
        while sum(len(m["content"]) for m in msgs) < mb * 1e6:
            msgs += [{"role": "user", "content": f"[{len(msgs)}] {turn}"},
                     {"role": "assistant", "content": f"ok {len(msgs)}: {turn[:500]}"}]
        msgs.append({"role": "user", "content": "now what?"})
    return json.dumps({"model": "p", "messages": msgs, "max_tokens": 4}).encode()


async def probe(url: str, stop: asyncio.Event, lat: list[float]) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        while not stop.is_set():
            t = time.perf_counter()
            async with http.get(url + "/health") as r:
                await r.read()
            lat.append(time.perf_counter() - t)
            await asyncio.sleep(0.02)


async def run(args: argparse.Namespace, src: Path) -> dict:
    cmd = [sys.executable, "-m", "legorl.cli", "serve", "--model", args.model, "--kv-budget-tokens", "16384"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 300)
        url = line.split(" on ")[-1].strip()
        bodies = [make_body(args.mb, args.shape, i) for i in range(args.n)]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            async with http.post(url + "/sessions") as r:
                base = (await r.json())["openai_base_url"]
            small = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            async with http.post(base + "/chat/completions", json=small) as r:  # warm-up
                await r.read()
            await asyncio.sleep(1.0)
            before, _ = rss_mb(proc.pid)
            calm: list[float] = []
            stop = asyncio.Event()
            t = asyncio.create_task(probe(url, stop, calm))
            await asyncio.sleep(1.0)
            stop.set()
            await t
            lat: list[float] = []
            stop = asyncio.Event()
            t = asyncio.create_task(probe(url, stop, lat))
            sem = asyncio.Semaphore(args.concurrency)
            calls: list[tuple[int, float, str]] = []

            async def send(body: bytes) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    async with http.post(base + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"}) as r:
                        out = await r.json(content_type=None)
                    msg = out["error"]["message"][:70] if "error" in out else "ok"
                    calls.append((r.status, time.perf_counter() - t0, msg))

            t_all = time.perf_counter()
            await asyncio.gather(*(send(b) for b in bodies))
            wall = time.perf_counter() - t_all
            stop.set()
            await t
            await asyncio.sleep(1.0)
            after, peak = rss_mb(proc.pid)
        return {"src": str(src), "before": before, "after": after, "peak": peak, "calls": calls, "wall": wall,
                "lag_max": max(lat), "lag_p50": statistics.median(lat), "calm_p50": statistics.median(calm),
                "probes": len(lat)}
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--shape", choices=["history", "single"], default="history")
    ap.add_argument("--src", action="append", default=None, help="source trees to compare (default: this one)")
    args = ap.parse_args()
    srcs = [Path(s).resolve() for s in (args.src or [str(ROOT / "src")])]
    print(f"{args.n} bodies of {args.mb:g} MB ({args.shape}), {args.concurrency} at a time, model {args.model}")
    for src in srcs:
        r = asyncio.run(run(args, src))
        print(f"\n{r['src']}")
        print(f"  RSS before {r['before']:.0f} MB  after {r['after']:.0f} MB  peak {r['peak']:.0f} MB")
        print(f"  /health latency: idle p50 {r['calm_p50'] * 1e3:.1f} ms; during the bodies p50 "
              f"{r['lag_p50'] * 1e3:.1f} ms, max {r['lag_max'] * 1e3:.0f} ms ({r['probes']} probes)")
        print(f"  large calls ({r['wall']:.1f} s in all): " + "; ".join(
            f"{s} in {dt:.1f} s ({m})" for s, dt, m in r["calls"]))


if __name__ == "__main__":
    main()
