"""Trainer throughput: legorl's actor update vs a plain HF forward/backward of the same batch.

    .venv/bin/python bench/train.py [--model smollm2-135m-instruct] [--batch 8] [--seq 256] [--reps 2]

Both sides process the same right-padded batch (half of each sequence is policy tokens) with AdamW,
in fp32 on this machine's threads, measured alternately in one run. legorl's step includes what an
RL step needs beyond a supervised one: the old-logprob pass, the clipped surrogate, entropy, and the
gather of only the policy positions' logits. The demo's before/after validation pass rate is read
from its log when present (runs/demo/logs/demo.jsonl, produced by `legorl train examples/demo.toml`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from legorl.config import AlgorithmSection, TrainerSection
from legorl.models import resolve_model
from legorl.tasks.model import Task
from legorl.train.actor import Actor
from legorl.train.batch import collate
from legorl.trial import TrialResult, TrialSpec, TrialTokens


def make_batch(n: int, seq: int, vocab: int) -> list[TrialResult]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        toks = torch.randint(0, vocab, (seq,), generator=g).tolist()
        mask = [0] * (seq // 2) + [1] * (seq - seq // 2)
        lps = [-2.0 if m else 0.0 for m in mask]
        spec = TrialSpec(Task("t", Path("."), "x"), group_id=f"g{i // 2}", trial_id=f"r{i}")
        out.append(TrialResult(spec, "failed", "", float(i % 2), TrialTokens(toks, mask, lps)))
    return out


def legorl_step(actor: Actor, rollouts: list[TrialResult]) -> float:
    t0 = time.perf_counter()
    batch = collate(rollouts)
    old = actor.compute_logprobs(batch)
    adv = (batch.rewards - batch.rewards.mean()).unsqueeze(-1) * batch.mask
    actor.update(batch, adv, old)
    return time.perf_counter() - t0


def hf_step(model, opt, rollouts: list[TrialResult], micro: int) -> float:
    t0 = time.perf_counter()
    ids = torch.tensor([r.tokens.token_ids for r in rollouts])
    labels = ids.clone()
    labels[:, : ids.shape[1] // 2] = -100
    for i in range(0, len(rollouts), micro):
        out = model(input_ids=ids[i : i + micro], labels=labels[i : i + micro])
        (out.loss * min(micro, len(rollouts) - i) / len(rollouts)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    path = resolve_model(args.model)
    rollouts = make_batch(args.batch, args.seq, 30000)
    actor = Actor(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                  TrainerSection(lr=1e-6, micro_batch_size=args.micro), AlgorithmSection(), 1.0)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)
    tokens = args.batch * args.seq
    lg, hfs = [], []
    for _ in range(args.reps):  # alternate so both see the same machine noise
        lg.append(legorl_step(actor, rollouts))
        hfs.append(hf_step(hf, opt, rollouts, args.micro))
    best_l, best_h = min(lg), min(hfs)
    print(f"model {path.name}, batch {args.batch} x {args.seq} tokens (half policy), micro-batch {args.micro}, "
          f"torch threads {torch.get_num_threads()}, best of {args.reps}")
    print(f"legorl actor step (old logprobs + PPO update): {tokens / best_l:7.1f} tok/s  ({best_l:.1f} s)")
    print(f"plain HF forward/backward + AdamW          : {tokens / best_h:7.1f} tok/s  ({best_h:.1f} s)")
    print(f"ratio legorl / HF: {best_h / best_l:.2f}x (legorl does one extra no-grad forward for old logprobs)")
    log = Path("runs/demo/logs/demo.jsonl")
    if log.exists():
        rows = [json.loads(x) for x in log.read_text().splitlines()]
        val = [(r["step"], r["val/pass_rate"]) for r in rows if "val/pass_rate" in r]
        if len(val) >= 2:
            print(f"demo val pass rate (runs/demo): step {val[0][0]}: {val[0][1]:.3f} -> step {val[-1][0]}: "
                  f"{val[-1][1]:.3f}  (legorl train examples/demo.toml)")


if __name__ == "__main__":
    main()
