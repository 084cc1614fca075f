"""AdamW's step on a real model's parameters, three ways: per tensor (`foreach=False`, the trainers' optimizer
until 2026-12-07), multi-tensor (`foreach=True`, torch's default) and fused (`fused=True`, train/optim.py). Each
variant runs in a fresh subprocess (its own peak RSS), alternated `--reps` times (this machine is noisy).

    .venv/bin/python bench/adamw.py [--model smollm2-135m-instruct] [--steps 6] [--reps 2]

Prints per variant the median step time and the step's peak RSS above the model, grads and AdamW state, then
the ratios against the fused step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, time
import torch
from transformers import AutoModelForCausalLM
from legorl.models import resolve_model
variant, model, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
m = AutoModelForCausalLM.from_pretrained(resolve_model(model), dtype=torch.float32)
params = list(m.parameters())
for p in params:
    p.grad = torch.randn_like(p) * 1e-3
kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[variant]
opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, **kw)
opt.step()  # the first step allocates the moments
def rss_kb():
    return int(open("/proc/self/statm").read().split()[1]) * 4  # resident pages (4 KiB)
held = rss_kb()  # weights, grads, the two moments (and whatever the allocator keeps)
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    opt.step()
    times.append(time.perf_counter() - t0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"step_s": sorted(times)[len(times) // 2], "temp_gb": max(0, after - held) * 1024 / 1e9,
                  "params": sum(p.numel() for p in params)}))
"""

VARIANTS = ("loop", "foreach", "fused")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    got: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(a.reps):
        for v in VARIANTS:
            out = subprocess.run([sys.executable, "-c", _CHILD, v, a.model, str(a.steps)],
                                 capture_output=True, text=True, check=True).stdout
            got[v].append(json.loads(out.strip().splitlines()[-1]))
    med = {v: statistics.median(r["step_s"] for r in runs) for v, runs in got.items()}
    for v, runs in got.items():
        print(f"{v}: {med[v]:.3f} s a step over {runs[0]['params'] / 1e6:.1f}M parameters, step temporaries "
              f"{max(r['temp_gb'] for r in runs):.2f} GB")
    for v in VARIANTS[:-1]:
        print(f"AdamW step, {v} / fused: {med[v] / med['fused']:.2f}x")


if __name__ == "__main__":
    main()
