"""The embedded engine's decode step with and without the lean forward (serving/embedded/lean.py), side by side.

    .venv/bin/python bench/lean_decode.py [--rows 2 8 14] [--rounds 2]

For each row count: a fresh one-thread engine of SmolLM2-135M (a demo replica: 10,240-token pool, both C kernels)
prefills that many prompts of 200-450 random tokens, then decodes 64 tokens in each at once; the median ms of its
decode steps is taken with `lean_decode=True` and `False`, alternating fresh processes for `--rounds`. The two
paths compute the same logits bit for bit (tests/serving/test_lean_decode.py); this measures what the HF
modules' Python and the torch function mode cost a step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys

from _engine_step import engine_step_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2, 8, 14])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
