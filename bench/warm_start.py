"""The warm start's fine-tune, one epoch over a run's demonstration transcripts, three ways: one row per
forward with every row recomputed (activation checkpointing as it was), one row per forward recomputed only when
its activations would pass `WARM_START_ROW_ACT_BYTES` (the recompute rule), grouped forwards that forward the
rows' common prefix with every row (as before 2026-12-07), and today's grouped forwards (rows of similar length
share a forward under that limit: `warm_start_forwards`; the prefix every row of a forward opens with, the system
prompt, computed once: `shared_prefix`); each variant in a fresh subprocess, alternated `--reps` times (this
machine is noisy: compare within a run).

    .venv/bin/python bench/warm_start.py RUN/warm_start/transcripts.jsonl [--rows 32] [--reps 2]
        [--variants no-shared-prefix grouped] [--model smollm2-135m-instruct]

Prints per variant the median wall and CPU seconds, sequence tokens per second and peak RSS, then the ratios
(the CPU ratio holds better on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, tempfile, time
from pathlib import Path
import legorl.ops.preflight_memory as pm
from legorl.config import RunConfig
from legorl.models import resolve_model
from legorl.models.chat import load_tokenizer
from legorl.train.warmstart import Transcript, encode, finetune

path, rows, model, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if variant == "recompute-all":  # one row per forward, every row recomputed (as before the recompute rule)
    pm.WARM_START_ROW_ACT_BYTES = 0.0
elif variant == "one-row":  # one row per forward, recomputed by the rule (as before grouped forwards)
    pm.warm_start_forwards = lambda d, lengths: [[i] for i in range(len(lengths))]
elif variant == "no-shared-prefix":  # grouped forwards, the common prefix forwarded with every row
    import legorl.train.warmstart as ws
    ws.shared_prefix = lambda ids, att: None
model_dir = resolve_model(model)
tok = load_tokenizer(model_dir)
lines = Path(path).read_text().splitlines()[:rows]
examples = [encode(tok, Transcript(d["messages"], d["train_from"], d["source"])) for d in map(json.loads, lines)]
section = RunConfig().warm_start.model_copy(update={"epochs": 1, "lr": 1e-4, "batch_size": 4})
with tempfile.TemporaryDirectory() as out:
    t0, c0 = time.perf_counter(), time.process_time()
    finetune(model_dir, examples, section, seed=0, out_dir=Path(out) / "m", on_line=lambda _: None, checkpointing=True)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"s": dt, "cpu_s": cpu, "tokens": sum(len(e.input_ids) for e in examples),
                  "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9}))
"""

VARIANTS = ("recompute-all", "one-row", "no-shared-prefix", "grouped")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("transcripts")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                    help="which to run (grouped, today's, is always run: the ratios are against it)")
    a = ap.parse_args()
    variants = [v for v in VARIANTS if v in a.variants or v == "grouped"]
    got: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(a.reps):
        for v in variants:
            out = subprocess.run([sys.executable, "-c", _CHILD, a.transcripts, str(a.rows), a.model, v],
                                 capture_output=True, text=True, check=True).stdout
            got[v].append(json.loads(out.strip().splitlines()[-1]))
    med, cpu = {}, {}
    for v, runs in got.items():
        s = med[v] = statistics.median(r["s"] for r in runs)
        cpu[v] = statistics.median(r["cpu_s"] for r in runs)
        print(f"{v}: {s:.1f} s wall, {cpu[v]:.1f} s CPU for {runs[0]['tokens']} tokens ({runs[0]['tokens'] / s:.0f} "
              f"tok/s), peak RSS {max(r['peak_gb'] for r in runs):.2f} GB")
    for slow in variants[:-1]:
        print(f"warm start epoch, {slow} / grouped: {med[slow] / med['grouped']:.2f}x wall, "
              f"{cpu[slow] / cpu['grouped']:.2f}x CPU")


if __name__ == "__main__":
    main()
