"""Trainer benchmarks, each side by side in one run (this machine is noisy: compare within a run).

    .venv/bin/python bench/train.py [--model smollm2-135m-instruct] [--batch 8] [--seq 256] [--reps 2]
                                    [--ckpt-seq 1024] [--ranks-model tiny-llama] [--skip ckpt,ranks]
                                    [--groups 8 --group-size 4 --prompt 134 --response 22 --system 0]
                                    [--clock wall|cpu] [--threads N]

0. The demo's own batch (`grouped`): `--groups` GRPO groups of `--group-size` rows of one `--prompt`-token
   prompt (the first `--system` tokens the same in every group) and responses of ~`--response` tokens
   (uniform +-12): legorl's step with shared prefixes (micro-batches of 4 rows, of 16, and the whole batch in one),
   without them, and plain HF forward/backward + AdamW on the same right-padded rows, 4 per micro-batch.

1. Throughput: legorl's on-policy trainer step (old logprobs fused into the gradient pass), the same with
   a separate old-logprob pass, and a plain HF forward/backward + AdamW on the same right-padded batch
   (half of each row policy tokens), fp32, alternated.
2. Peak memory of one forward/backward at `--ckpt-seq` tokens per row: the default, with activation
   checkpointing, and with the model's own vocabulary head instead of the recomputed chunks (each in a
   fresh subprocess: peak RSS above the loaded model, via /proc's VmHWM reset).
3. Padding share of fixed micro-batches vs token-budget micro-batches on a demo-like length mix.
4. One trainer step and one weight stream with 2 FSDP2 ranks (gloo) vs 1 process, on `--ranks-model`
   (2 cores cannot show a speed-up; this reports the overhead).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

from legorl.config import load_config
from legorl.models import resolve_model
from legorl.tasks.model import Task
from legorl.train.batch import collate
from legorl.train.build import build_trainer
from legorl.train.memory import fixed_micro_batches, padding_ratio, token_budget_micro_batches
from legorl.trial import TrialResult, TrialSpec, TrialTokens


def make_batch(n: int, seq: int, vocab: int, lengths: list[int] | None = None) -> list[TrialResult]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        length = lengths[i] if lengths else seq
        toks = torch.randint(0, vocab, (length,), generator=g).tolist()
        mask = [0] * (length // 2) + [1] * (length - length // 2)
        lps = [-2.0 if m else 0.0 for m in mask]
        spec = TrialSpec(Task("t", Path("."), "x"), group_id=f"g{i // 2}", trial_id=f"r{i}")
        out.append(TrialResult(spec, "failed", "", float(i % 2), TrialTokens(toks, mask, lps)))
    return out


def trainer(model: str, *overrides: str):
    cfg = load_config(None, [f"model.path={model}", "trainer.lr=1e-6", *overrides])
    return build_trainer(cfg, resolve_model(model))


CLOCK = time.perf_counter  # --clock cpu: this process's CPU time (with --threads 1, robust to neighbours)


def timed(fn) -> float:
    t0 = CLOCK()
    fn()
    return CLOCK() - t0


def hf_step(model, opt, rows: list[TrialResult], micro: int) -> None:
    ids = torch.tensor([r.tokens.token_ids for r in rows])
    labels = ids.clone()
    labels[:, : ids.shape[1] // 2] = -100
    for i in range(0, len(rows), micro):
        out = model(input_ids=ids[i : i + micro], labels=labels[i : i + micro])
        (out.loss * min(micro, len(rows) - i) / len(rows)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def grouped_batch(args, vocab: int) -> list[TrialResult]:
    """The demo's shape: groups of rows of one prompt each, random tokens, varied response lengths."""
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    system = torch.randint(0, vocab, (args.system,), generator=g).tolist()
    out = []
    for gi in range(args.groups):
        prompt = system + torch.randint(0, vocab, (args.prompt - args.system,), generator=g).tolist()
        for r in range(args.group_size):
            n = max(1, args.response + rng.randint(-12, 12))
            resp = torch.randint(0, vocab, (n,), generator=g).tolist()
            toks = prompt + resp
            spec = TrialSpec(Task(f"t{gi}", Path("."), "x"), group_id=f"g{gi}", trial_id=f"r{gi}.{r}")
            tokens = TrialTokens(toks, [0] * len(prompt) + [1] * n, [0.0] * len(prompt) + [-2.0] * n)
            out.append(TrialResult(spec, "failed", "", float(r % 2), tokens))
    return out


def hf_padded_step(model, opt, rows: list[TrialResult], micro: int) -> None:
    """Plain HF on right-padded rows: loss over the response tokens, `micro` rows per forward/backward."""
    n_tokens = sum(sum(r.tokens.response_mask) for r in rows)
    for i in range(0, len(rows), micro):
        part = rows[i : i + micro]
        t = max(len(r.tokens.token_ids) for r in part)
        ids = torch.zeros((len(part), t), dtype=torch.long)
        am = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for j, r in enumerate(part):
            n = len(r.tokens.token_ids)
            ids[j, :n] = torch.tensor(r.tokens.token_ids)
            am[j, :n] = 1
            m = torch.tensor(r.tokens.response_mask, dtype=torch.bool)
            labels[j, :n][m] = ids[j, :n][m]
        out = model(input_ids=ids, attention_mask=am, labels=labels)
        k = int((labels[:, 1:] != -100).sum())
        (out.loss * k / n_tokens).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def bench_grouped(args) -> None:
    from transformers import AutoModelForCausalLM

    rows = grouped_batch(args, 30000)
    batch = collate(rows)
    tokens = int(batch.attention_mask.sum())
    distinct = args.system + args.groups * (args.prompt - args.system) + int(batch.mask.sum()) + len(rows)
    t = trainer(args.model)  # one trainer, its settings switched per run (memory: one model + Adam state)
    # (share_prefix, micro_batch_size, max_tokens_per_micro_batch); the demo packs groups by a 4,096-token budget
    runs = {"shared, micro-batch 4": (True, 4, None), "shared, micro-batch 16": (True, 16, None),
            f"shared, micro-batch {len(rows)}": (True, len(rows), None),
            "shared, token budget 4096": (True, 4, 4096), "unshared, micro-batch 4": (False, 4, None)}

    def step(share: bool, micro: int, budget: int | None) -> None:
        for c in (t.trainer, t.actor.trainer):
            c.share_prefix, c.micro_batch_size, c.max_tokens_per_micro_batch = share, micro, budget
        t.update(batch)

    hf = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)
    times: dict[str, list[float]] = {k: [] for k in [*runs, "hf"]}
    for _ in range(args.reps):  # alternate so all see the same machine noise
        for name, setting in runs.items():
            times[name].append(timed(lambda setting=setting: step(*setting)))
            print(f"  ... {name}: {times[name][-1]:.2f} s", flush=True)
        times["hf"].append(timed(lambda: hf_padded_step(hf, opt, rows, 4)))
        print(f"  ... plain HF: {times['hf'][-1]:.2f} s", flush=True)
    best = {k: min(v) for k, v in times.items()}
    print(f"[grouped] {args.model}: {args.groups} groups x {args.group_size} rows, prompt {args.prompt} tokens "
          f"({args.system} shared by all groups), responses ~{args.response}: {tokens} row tokens, ~{distinct} "
          f"distinct; torch threads {torch.get_num_threads()}, best of {args.reps}")
    for name in runs:
        print(f"  legorl step, {name:24}: {tokens / best[name]:7.1f} row tok/s ({best[name]:.2f} s)")
    print(f"  plain HF fwd/bwd + AdamW, micro-batch 4  : {tokens / best['hf']:7.1f} row tok/s ({best['hf']:.2f} s)")
    fastest = min(runs, key=lambda k: best[k])
    print(f"  update time HF / legorl as the demo runs it (token budget 4096): "
          f"{best['hf'] / best['shared, token budget 4096']:.2f}x")
    print(f"  ratio legorl(shared, micro-batch 4) / HF: {best['hf'] / best['shared, micro-batch 4']:.2f}x   "
          f"legorl({fastest}) / HF: {best['hf'] / best[fastest]:.2f}x   "
          f"legorl(unshared) / HF: {best['hf'] / best['unshared, micro-batch 4']:.2f}x")


def bench_throughput(args) -> None:
    from transformers import AutoModelForCausalLM

    rows = make_batch(args.batch, args.seq, 30000)
    batch = collate(rows)
    micro = f"trainer.micro_batch_size={args.micro}"
    fused = trainer(args.model, micro)
    separate = trainer(args.model, micro, "trainer.fuse_old_logprob_pass=false")
    hf = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)
    times: dict[str, list[float]] = {"fused": [], "separate": [], "hf": []}
    for _ in range(args.reps):  # alternate so all see the same machine noise
        times["fused"].append(timed(lambda: fused.update(batch)))
        times["separate"].append(timed(lambda: separate.update(batch)))
        times["hf"].append(timed(lambda: hf_step(hf, opt, rows, args.micro)))
    best = {k: min(v) for k, v in times.items()}
    tokens = args.batch * args.seq
    print(f"[throughput] {args.model}, batch {args.batch} x {args.seq} tokens (half policy), micro-batch {args.micro}, "
          f"torch threads {torch.get_num_threads()}, best of {args.reps}")
    print(f"  legorl step, old logprobs fused    : {tokens / best['fused']:7.1f} tok/s ({best['fused']:.2f} s)")
    print(f"  legorl step, separate logprob pass : {tokens / best['separate']:7.1f} tok/s ({best['separate']:.2f} s)")
    print(f"  plain HF forward/backward + AdamW  : {tokens / best['hf']:7.1f} tok/s ({best['hf']:.2f} s)")
    print(f"  ratio legorl(fused) / HF: {best['hf'] / best['fused']:.2f}x   "
          f"legorl(separate) / HF: {best['hf'] / best['separate']:.2f}x")


_PEAK_CHILD = r"""
import json, sys, torch
from legorl.config import load_config
from legorl.models import resolve_model
from legorl.train.build import build_trainer
sys.path.insert(0, "bench")
from train import make_batch
from legorl.train.batch import collate
model, seq, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ckpt = mode == "ckpt"
if mode == "full-head":  # the model's own head over every kept position (what FSDP2 ranks do)
    import legorl.train.logprobs as lp_mod
    lp_mod._plain_head = lambda _model: None
cfg = load_config(None, [f"model.path={model}", f"model.gradient_checkpointing={str(ckpt).lower()}",
                         "trainer.micro_batch_size=2"])
t = build_trainer(cfg, resolve_model(model))
batch = collate(make_batch(2, seq, 30000))
def kb(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])
base = kb("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
with torch.enable_grad():
    lp, _ = t.actor._forward(t.actor.model, batch)
    (lp * batch.mask).sum().backward()
print(json.dumps({"peak_mb": (kb("VmHWM:") - base) / 1024}))
"""


def bench_checkpointing(args) -> None:
    out = {}
    for mode in ("plain", "ckpt", "full-head"):
        res = subprocess.run([sys.executable, "-c", _PEAK_CHILD, args.model, str(args.ckpt_seq), mode],
                             capture_output=True, text=True, check=True)
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])["peak_mb"]
    print(f"[memory] one forward/backward, 2 rows x {args.ckpt_seq} tokens, {args.model}, peak RSS above the model:")
    print(f"  default (vocab logits in recomputed chunks): {out['plain']:8.1f} MiB")
    print(f"  with activation checkpointing              : {out['ckpt']:8.1f} MiB  "
          f"({1 - out['ckpt'] / out['plain']:.0%} lower than default)")
    print(f"  the model's own head over all positions    : {out['full-head']:8.1f} MiB  "
          f"(chunking saves {1 - out['plain'] / out['full-head']:.0%})")


def bench_padding(args) -> None:
    rng = random.Random(0)
    # the demo's mix: ~120-200 prompt tokens, 4-64 response tokens; a few multi-turn rows 3x longer
    lengths = [rng.randint(120, 200) + rng.randint(4, 64) for _ in range(32)]
    lengths[::8] = [3 * x for x in lengths[::8]]
    fixed = fixed_micro_batches(range(len(lengths)), 4)
    budget = 4 * sorted(lengths)[len(lengths) // 2]
    packed = token_budget_micro_batches(lengths, range(len(lengths)), budget)
    print(f"[padding] 32 demo-like rows (lengths {min(lengths)}-{max(lengths)}):")
    print(f"  fixed micro-batches of 4 rows      : {padding_ratio(lengths, fixed):.1%} padding, {len(fixed)} micro-batches")
    print(f"  token budget {budget} tokens/micro-batch: {padding_ratio(lengths, packed):.1%} padding, "
          f"{len(packed)} micro-batches")


def bench_ranks(args) -> None:
    from legorl.train.ranks import TrainerRanks

    model = args.ranks_model
    cfg = load_config(None, [f"model.path={model}", "trainer.lr=1e-6", "trainer.n_ranks=2"])
    batch = collate(make_batch(8, 128, 1000))
    one = trainer(model)
    two = TrainerRanks(cfg, resolve_model(model), 2)
    try:
        for t in (one, two):  # warm-up
            t.update(batch)
        rows = {}
        for name, t in (("1 process", one), ("2 ranks", two)):
            step = min(timed(lambda t=t: t.update(batch)) for _ in range(args.reps))
            sync = min(timed(lambda t=t: t.stream_weights(lambda _b: None)) for _ in range(args.reps))
            rows[name] = (step, sync, t.stream_weights(lambda _b: None))
    finally:
        two.close()
    print(f"[ranks] {model}, batch 8 x 128 tokens, best of {args.reps}:")
    for name, (step, sync, nbytes) in rows.items():
        print(f"  {name:9}: step {step:6.2f} s, weight stream {sync:6.3f} s ({nbytes / 2**20:.1f} MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--ckpt-seq", type=int, default=1024)
    ap.add_argument("--ranks-model", default="tiny-llama")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=134)
    ap.add_argument("--response", type=int, default=22)
    ap.add_argument("--system", type=int, default=0)
    ap.add_argument("--skip", default="", help="comma-separated: grouped,throughput,ckpt,padding,ranks")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: time by this process's CPU time (a loaded machine; use with --threads 1)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    global CLOCK
    if args.clock == "cpu":
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    for name, fn in (("grouped", bench_grouped), ("throughput", bench_throughput), ("ckpt", bench_checkpointing), ("padding", bench_padding),
                     ("ranks", bench_ranks)):
        if name not in skip:
            fn(args)


if __name__ == "__main__":
    main()
