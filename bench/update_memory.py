"""Peak RSS and time of the trainer update on an agent-shaped batch, per memory setting, each in a fresh
subprocess (this machine is noisy: compare within a run).

    .venv/bin/python bench/update_memory.py [--model smollm2-135m-instruct] [--updates 2] [--reps 1]
                                            [--groups 4] [--variants foreach,loop,loop+chunk256,...]

The batch is what examples/agent-lookact.toml trains on: `--groups` GRPO groups x 8 trials (half solved), each a
~150-token prompt shared by its group, then 3-4 turns of a ~25-token command (policy tokens) and a
20-120-token command output (mask 0); rows of ~300-700 tokens. The trainer is that config's: activation
checkpointing, its micro-batch token budget, shared prefixes, fused old logprobs. A variant names the AdamW
step (`foreach`: torch's multi-tensor default; `loop`: foreach=False; `fused`) and optionally the vocabulary
head's chunk (`+chunkN`, positions per chunk; default the code's); `+dynmmap` leaves glibc's dynamic mmap
threshold (the heap is otherwise `legorl train`'s: train/heap.py); `+nockpt` turns activation checkpointing
off; `+mbN` sets the micro-batch token budget; `+thp` runs with `THP_MEM_ALLOC_ENABLE=1` (torch's CPU allocator
puts buffers of 2 MB and more on transparent huge pages: fewer page faults where the kernel allows madvise).
Reported: the process's peak RSS over `--updates` updates (AdamW's state is made in the first), the peak above
the loaded trainer, and the median update time; then the RSS after the last update and after `trim_heap()` (what
`legorl train` now runs after each update: the freed pages malloc held) and the trim's time. The micro-batch
token budget, not the batch, sets the activations, so `--groups 1` shows the same peak at a quarter of the time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# The trainer and `batch(seed)`, an agent-shaped batch (bench/update_phases.py runs them too)
SETUP = r"""
import json, random, resource, sys, time
import torch
from pathlib import Path
from legorl.config import load_config
from legorl.models import resolve_model
from legorl.tasks.model import Task
from legorl.train.batch import collate
from legorl.train.build import build_trainer
from legorl.trial import TrialResult, TrialSpec, TrialTokens
import legorl.train.logprobs as lp_mod

model, variant, updates, groups = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from legorl.train.heap import limit_arenas, fix_mmap_threshold
opt, *flags = variant.split("+")
limit_arenas()
if "dynmmap" not in flags:  # `legorl train`'s heap (train/heap.py) unless the variant asks for glibc's default
    fix_mmap_threshold()
chunk = next((f[5:] for f in flags if f.startswith("chunk")), "")
sets = [f"model.path={model}", "trainer.max_logprob_abs_diff=100",
        f"model.gradient_checkpointing={'false' if 'nockpt' in flags else 'true'}"]
sets += [f"trainer.max_tokens_per_micro_batch={f[2:]}" for f in flags if f.startswith("mb")]
torch.manual_seed(0)
cfg = load_config("examples/agent-lookact.toml", sets)
t = build_trainer(cfg, resolve_model(model))
a = t.actor
kw = dict(lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay, betas=(0.9, 0.999), eps=1e-8)
if opt == "foreach":
    kw["foreach"] = True
elif opt == "loop":
    kw["foreach"] = False
elif opt == "fused":
    kw["fused"] = True
a.optimizer = torch.optim.AdamW(a.params, **kw)
a.scheduler = torch.optim.lr_scheduler.LambdaLR(a.optimizer, lambda _s: 1.0)
if chunk:
    d = list(lp_mod.token_logprobs.__defaults__)
    d[2] = int(chunk)  # (temperature, with_entropy, chunk, prefix, on_level)
    lp_mod.token_logprobs.__defaults__ = tuple(d)

def batch(seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for gi in range(groups):
        prompt = torch.randint(0, 40000, (rng.randint(130, 170),), generator=g).tolist()
        for r in range(8):
            toks, mask = list(prompt), [0] * len(prompt)
            for _turn in range(rng.randint(3, 4)):
                n_act, n_out = rng.randint(12, 40), rng.randint(20, 120)
                toks += torch.randint(0, 40000, (n_act + n_out,), generator=g).tolist()
                mask += [1] * n_act + [0] * n_out
            lps = [-1.0 if m else 0.0 for m in mask]
            spec = TrialSpec(Task(f"k{gi}", Path("."), "x"), group_id=f"g{gi}", trial_id=f"g{gi}r{r}")
            rows.append(TrialResult(spec, "failed", "", float(r % 2), TrialTokens(toks, mask, lps)))
    return collate(rows, 2)
"""

_MEASURE = r"""
def kb(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])

base = kb("VmRSS:")
times = []
for u in range(updates):
    b = batch(u)
    t0 = time.perf_counter()
    t.update(b)
    times.append(time.perf_counter() - t0)
peak, after = kb("VmHWM:"), kb("VmRSS:")
from legorl.train.heap import trim_heap
t0 = time.perf_counter()
trim_heap()
trim_s = time.perf_counter() - t0
print(json.dumps({"peak_gb": peak / 1e6, "above_gb": (peak - base) / 1e6, "times": times,
                  "tokens": int(b.attention_mask.sum()), "after_gb": after / 1e6, "trimmed_gb": kb("VmRSS:") / 1e6,
                  "trim_s": trim_s}))
"""


def run(model: str, variant: str, updates: int, groups: int) -> dict:
    env = dict(os.environ, THP_MEM_ALLOC_ENABLE="1") if "thp" in variant.split("+") else None  # read at torch import
    res = subprocess.run([sys.executable, "-c", SETUP + _MEASURE, model, variant, str(updates), str(groups)],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{variant}: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--variants", default="foreach+chunk1024,loop+chunk1024,foreach+chunk256,loop+chunk256")
    args = ap.parse_args()
    variants = args.variants.split(",")
    out: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.reps):
        for v in variants:  # alternated, so load drifts hit every variant alike
            out[v].append(run(args.model, v, args.updates, args.groups))
            r = out[v][-1]
            print(f"  {v:16} peak {r['peak_gb']:.2f} GB (+{r['above_gb']:.2f} above the loaded trainer), "
                  f"updates {', '.join(f'{x:.1f}' for x in r['times'])} s; RSS after {r['after_gb']:.2f} GB, "
                  f"after trim_heap {r['trimmed_gb']:.2f} GB ({r['trim_s']:.2f} s)", flush=True)
    print(f"[update memory] {args.model}, agent-lookact batch ({8 * args.groups} rows, ~{out[variants[0]][0]['tokens']} tokens), "
          f"{args.updates} updates, {args.reps} rep(s):")
    for v, rs in out.items():
        peak = min(r["peak_gb"] for r in rs)
        med = statistics.median(x for r in rs for x in r["times"][1:] or r["times"])
        print(f"  {v:16} peak RSS {peak:.2f} GB   median update {med:.1f} s")


if __name__ == "__main__":
    main()
