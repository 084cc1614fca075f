"""Where the trainer update's peak RSS sits, phase by phase: `bench/update_memory.py`'s agent-shaped batch,
the peak reset before each phase (writing 5 to /proc/self/clear_refs resets VmHWM) and read after it.

    .venv/bin/python bench/update_phases.py [--model smollm2-135m-instruct] [--updates 2] [--groups 2] [--trim]

Prints, per forward, backward and optimizer phase, the RSS at its end and its peak. `--trim` runs
`trim_heap()` after every backward: it separates heap kept between micro-batches (the RSS drops) from a
transient that lives inside one backward (the peak does not). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from update_memory import SETUP

_PROBE = r"""
from legorl.train.heap import trim_heap
trim = sys.argv[5] == "1"

def kb(key):
    return int(next(x for x in open("/proc/self/status") if x.startswith(key)).split()[1])

log = []

def mark(name):
    log.append((name, kb("VmRSS:") / 1e6, kb("VmHWM:") / 1e6))
    open("/proc/self/clear_refs", "w").write("5")

A = type(a)
orig_fwd, orig_bwd = A._forward, torch.Tensor.backward

def fwd(self, *args, **kw):
    mark("(before forward)")
    out = orig_fwd(self, *args, **kw)
    mark("forward")
    return out

def bwd(self, *args, **kw):
    mark("(before backward)")
    r = orig_bwd(self, *args, **kw)
    mark("backward")
    if trim:
        trim_heap()
        mark("trim_heap")
    return r

def opt(self):
    mark("(before optimizer)")
    n = torch.nn.utils.clip_grad_norm_(self.params, self.trainer.max_grad_norm)
    self.optimizer.step()
    mark("clip + AdamW step")
    self.optimizer.zero_grad(set_to_none=True)
    mark("zero_grad")
    return float(n)

A._forward, A._optimizer_step, torch.Tensor.backward = fwd, opt, bwd
mark("trainer loaded")
for u in range(updates):
    b = batch(u)
    mark(f"update {u}: batch of {b.size} rows, {int(b.attention_mask.sum())} tokens")
    t.update(b)
    mark(f"update {u} done")
for name, rss, hwm in log:
    if not name.startswith("("):
        print(f"{name:48} RSS at end {rss:5.2f} GB   peak in phase {hwm:5.2f} GB")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--trim", action="store_true", help="trim_heap() after every backward")
    args = ap.parse_args()
    res = subprocess.run([sys.executable, "-c", SETUP + _PROBE, args.model, "loop", str(args.updates),
                          str(args.groups), "1" if args.trim else "0"], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-2000:])
    print(res.stdout, end="")


if __name__ == "__main__":
    main()
