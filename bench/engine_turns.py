"""A rollout's engine work without the rest of the run: multi-turn sessions on one one-thread embedded engine.

    .venv/bin/python bench/engine_turns.py [--sessions 16] [--rounds 2] [--variants rows16,rows64,mmap1m]

Each session is a look-act trial's shape on SmolLM2-135M: a 36-token system prompt shared by all, a 30-60-token
task, then 3-4 turns of a 12-40-token reply (sampled, T 1.0) followed by 15-45 tokens of tool output and a 0.3 s
pause (the command), all sessions at once on a 10,240-token pool (a demo replica's). So most steps are decode
rows, and the rest carry a prompt chunk beside them, as in a run. Every variant runs in a fresh process,
alternating for `--rounds`; it prints the engine's summed step time, its steps with more than 16 tokens, and the
ratio to the first variant.

Variants: `rowsN` takes the few-row linear kernel for steps of up to N tokens (`skinny_linear.MAX_ROWS`; the
engine's own is 64); `mmap1m` runs the engine under glibc's mmap threshold fixed at 1 MiB, which `legorl train`
sets only while an update runs (train/heap.py); `default` is the engine as shipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

VARIANTS = {"default": {}, "rows16": {"rows": 16}, "rows64": {"rows": 64}, "rows128": {"rows": 128},
            "mmap1m": {"env": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}}}


async def child(sessions: int, rows: int | None) -> dict:
    import legorl.serving.embedded.skinny_linear as few_rows
    from legorl.models import resolve_model
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.types import GenerateRequest, SamplingParams

    if rows is not None:
        few_rows.MAX_ROWS = rows  # read at each call
    eng = EmbeddedEngine.from_pretrained(resolve_model("smollm2-135m-instruct"), kv_budget_tokens=10240,
                                         num_threads=1)
    system = [random.Random(0).randint(100, 40000) for _ in range(36)]
    times: list[tuple[float, int]] = []
    step = eng.runner.step

    def timed(work, *args, **kwargs):
        t0 = time.perf_counter()
        out = step(work, *args, **kwargs)
        times.append((time.perf_counter() - t0, sum(w.n for w in work)))
        return out

    eng.runner.step = timed

    async def session(i: int) -> None:
        r = random.Random(1000 + i)
        ids = system + [r.randint(100, 40000) for _ in range(r.randint(30, 60))]
        for turn in range(r.randint(3, 4)):
            sp = SamplingParams(1.0, max_tokens=r.randint(12, 40), seed=10 * i + turn, ignore_eos=True)
            out = await eng.generate(GenerateRequest(list(ids), sp))
            ids += list(out.token_ids) + [r.randint(100, 40000) for _ in range(r.randint(15, 45))]
            await asyncio.sleep(0.3)

    try:
        await asyncio.gather(*[session(i) for i in range(sessions)])
    finally:
        await eng.close()
    return {"step_s": sum(t for t, _ in times), "steps": len(times),
            "chunk_s": sum(t for t, n in times if n > 16), "chunk_steps": sum(n > 16 for _, n in times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="rows16,rows64,mmap1m", help=f"comma-separated: {', '.join(VARIANTS)}")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        rows = VARIANTS[a.child].get("rows")
        print(json.dumps(asyncio.run(child(a.sessions, rows))))
        return
    names = a.variants.split(",")
    for n in names:
        if n not in VARIANTS:
            raise SystemExit(f"--variants: unknown {n!r} (one of {', '.join(VARIANTS)})")
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for _ in range(a.rounds):
        for n in names:
            env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
            env.update(VARIANTS[n].get("env", {}))
            cmd = [sys.executable, __file__, "--child", n, "--sessions", str(a.sessions)]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if res.returncode != 0:
                raise SystemExit(f"{n} failed:\n{res.stderr[-2000:]}")
            runs[n].append(json.loads(res.stdout.splitlines()[-1]))
    first = min(r["step_s"] for r in runs[names[0]])
    print(f"{a.sessions} sessions on one one-thread engine; engine step time, best of {a.rounds} (each round)")
    for n in names:
        best = min(runs[n], key=lambda r: r["step_s"])
        rounds = ", ".join(f"{r['step_s']:.2f}" for r in runs[n])
        print(f"{n:>8}: {best['step_s']:.2f} s ({rounds}); {best['chunk_steps']} of {best['steps']} steps carry a "
              f"prompt chunk: {best['chunk_s']:.2f} s; {first / best['step_s']:.3f}x the first variant's speed")


if __name__ == "__main__":
    main()
