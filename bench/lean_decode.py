"""The embedded engine's decode step with and without the lean forward (serving/embedded/lean.py), side by side.

    .venv/bin/python bench/lean_decode.py [--rows 2 8 14] [--rounds 2]
    .venv/bin/python bench/lean_decode.py --split [--rows 8 14]

For each row count: a fresh one-thread engine of SmolLM2-135M (a demo replica: 10,240-token pool, both C kernels)
prefills that many prompts of 200-450 random tokens, then decodes 64 tokens in each at once; the median ms of its
decode steps is taken with `lean_decode=True` and `False`, alternating fresh processes for `--rounds`. The two
paths compute the same logits bit for bit (tests/serving/test_lean_decode.py); this measures what the HF
modules' Python and the torch function mode cost a step.

`--split` instead times the lean step's parts in this process (per-call timers around the linears, the decode
attention, the norms and RoPE; ms a step, averaged over the 64 decode steps): where a decode step's time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import time

from _engine_step import engine_step_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2, 8, 14])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--split", action="store_true", help="the lean step's parts instead (see above)")
    a = ap.parse_args()
    if a.split:
        for rows in a.rows:
            split(rows)
        return
    if a.child:
        print(json.dumps(asyncio.run(engine_step_ms(a.rows[0], 200, 450, lean_decode=a.child == "lean"))))
        return
    print("engine decode step (median ms), SmolLM2-135M, 1 thread, 64 tokens over prompts of 200-450 tokens")
    for rows in a.rows:
        ms: dict[str, list[float]] = {"hf": [], "lean": []}
        for _ in range(a.rounds):
            for mode in ms:
                cmd = [sys.executable, __file__, "--child", mode, "--rows", str(rows)]
                res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                if (res["lean_steps"] > 0) != (mode == "lean"):
                    raise SystemExit(f"{mode}: the engine did not take that path ({res})")
                ms[mode].append(res["step_ms"])
        hf, lean = min(ms["hf"]), min(ms["lean"])
        print(f"rows {rows:>2}: hf {hf:6.1f} ms  lean {lean:6.1f} ms  ({hf / lean:.2f}x; rounds hf "
              f"{', '.join(f'{x:.1f}' for x in ms['hf'])}, lean {', '.join(f'{x:.1f}' for x in ms['lean'])})")


def split(rows: int) -> None:
    from legorl.serving.embedded import lean
    from legorl.serving.embedded import skinny_linear as few_rows

    spent: collections.Counter[str] = collections.Counter()

    def timed(module, name: str, part: str) -> None:
        fn = getattr(module, name)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[part] += time.perf_counter() - t0
            return out

        setattr(module, name, wrapper)

    timed(few_rows, "skinny_linear", "linears")
    timed(lean, "decode_attention", "attention")
    timed(lean, "_rms", "norms")
    timed(lean, "_rope", "rope")
    res = asyncio.run(engine_step_ms(rows, 200, 450, lean_decode=True))
    steps = res["lean_steps"]
    parts = ", ".join(f"{k} {1e3 * v / steps:.1f}" for k, v in spent.items())
    print(f"rows {rows:>2}: {res['step_ms']:.1f} ms a step (median); ms a step in: {parts}")


if __name__ == "__main__":
    main()
