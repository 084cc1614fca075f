"""How much of the weights a real update changes, and what `cluster.weight_delta` would send for it, on the
demo's update (a demo-shaped GRPO batch, SmolLM2, lr 3e-5): the weights as sent to fp32 replicas and to bf16
ones (`serving.dtype = "bfloat16"`: the wire carries the bf16 cast of the fp32 master weights), side by side.

    .venv/bin/python bench/weight_delta.py [--model smollm2-135m-instruct] [--lr 3e-5] [--steps 1]
                                           [--trainer-dtypes float32]

Per trainer dtype (`trainer.dtype`; bfloat16 is compute precision only, the master weights stay fp32), wire
dtype and step: the share of elements that changed bitwise, of 16-bit words (what the delta compares), the
bytes the delta encoding sends against the whole weights in that wire dtype and against the fp32 weights
(per bucket the smallest of bitmask, positions or whole, cluster/delta.py, the trainer's own 256 MB buckets),
and the seconds to encode (trainer rank 0) and apply (replica) it. The first Adam step moves every weight with
a gradient by about lr (m/sqrt(v) is the gradient's sign); `--steps 2` shows a later one too.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

from legorl.cluster import delta as D
from legorl.cluster.collective import CollectiveBucket, unpack
from legorl.config import load_config
from legorl.models import resolve_model
from legorl.serving.pairgroup import pack
from legorl.train.build import build_trainer
from legorl.train.steps import learn

sys.path.insert(0, str(Path(__file__).parent))
from train import grouped_batch  # bench/ is not a package: found through the path above


def snapshot(trainer, dtype: torch.dtype | None = None) -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Each bucket the trainer streams (cast to `dtype` as the wire does), packed (a copy): its tensors (views
    of it) and its bytes."""
    out = []

    def take(bucket: dict[str, torch.Tensor]) -> None:
        if dtype is not None:
            bucket = {k: v.to(dtype) if v.is_floating_point() else v for k, v in bucket.items()}
        flat, dtypes, shapes = pack(bucket)
        meta = CollectiveBucket(None, flat.numel(), tuple(bucket), 0, dtypes, shapes)
        out.append((unpack(flat, meta), flat))

    trainer.stream_weights(take)
    return out


def compare(before, after) -> dict[str, float]:
    elems = changed = words = words_changed = full = sent = 0
    enc_s = apply_s = 0.0
    for (tb, fb), (ta, fa) in zip(before, after, strict=True):
        for k in tb:
            a, b = tb[k].reshape(-1), ta[k].reshape(-1)
            ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            elems += a.numel()
            changed += int((a.view(ints) != b.view(ints)).sum())
        words += fa.numel() // 2
        words_changed += int((fb.view(torch.int16) != fa.view(torch.int16)).sum())
        full += fa.numel()
        t0 = time.perf_counter()
        d = D.encode(fb, fa)
        enc_s += time.perf_counter() - t0
        if d is None:
            sent += fa.numel()
            continue
        sent += d.payload.numel()
        base = fb.clone()
        t0 = time.perf_counter()
        D.apply(base, d.kind, d.payload, d.changed)
        apply_s += time.perf_counter() - t0
        assert torch.equal(base, fa) and D.checksum(base) == d.checksum
    return {"elements changed": changed / elems, "16-bit words changed": words_changed / words,
            "delta bytes / full": sent / full, "full MB": full / 1e6, "delta MB": sent / 1e6,
            "encode s": enc_s, "apply s": apply_s}


WIRES = {"float32": None, "bfloat16": torch.bfloat16}


def run(args, dtype: str) -> dict[tuple[str, str, int], dict[str, float]]:
    path = resolve_model(args.model)
    cfg = load_config(None, [f"model.path={args.model}", "trainer.micro_batch_size=4", f"trainer.lr={args.lr}",
                             f"trainer.dtype={dtype}"])
    trainer = build_trainer(cfg, path)
    batch = grouped_batch(args, trainer.actor.model.config.vocab_size)
    rows = {}
    before = {w: snapshot(trainer, d) for w, d in WIRES.items()}
    fp32_bytes = sum(f.numel() for _, f in before["float32"])
    for step in range(args.steps):
        t0 = time.perf_counter()
        metrics = learn(trainer, batch)
        update_s = time.perf_counter() - t0
        after = {w: snapshot(trainer, d) for w, d in WIRES.items()}
        for w in WIRES:
            row = compare(before[w], after[w])
            row["delta bytes / fp32 full"] = row["delta MB"] * 1e6 / fp32_bytes
            row.update({"grad norm": metrics.get("actor/grad_norm", float("nan")), "update s": update_s})
            rows[(dtype, w, step + 1)] = row
            print(f"  trainer {dtype}, wire {w}, step {step + 1}: "
                  + ", ".join(f"{k} {v:.4g}" for k, v in row.items()), flush=True)
        before = after
    del trainer, before, after
    gc.collect()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--trainer-dtypes", default="float32")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompt", type=int, default=134)
    p.add_argument("--response", type=int, default=22)
    p.add_argument("--system", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    results = {k: row for d in args.trainer_dtypes.split(",") for k, row in run(args, d).items()}
    cols = list(results)
    print(f"{args.model}, lr {args.lr}, demo-shaped batch ({args.groups}x{args.group_size} rows, "
          f"{args.prompt}-token prompts): columns trainer dtype / wire dtype / update")
    print(f"{'':30s}" + "".join(f"{f'{d}/{w}/step {s}':>24s}" for d, w, s in cols))
    keys = list(dict.fromkeys(k for row in results.values() for k in row))
    for k in keys:
        print(f"{k:30s}" + "".join(f"{results[c].get(k, float('nan')):24.4g}" for c in cols))


if __name__ == "__main__":
    main()
