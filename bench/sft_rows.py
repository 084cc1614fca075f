"""Would the warm start go faster with several transcripts per forward? One forward+backward of the warm
start's loss (`token_logprobs`, half the positions trained, as a demonstration's answer tokens are) on R rows
of T tokens, against one row of R*T tokens (a packed batch without its block-diagonal mask: the upper bound
packing could reach) and one row of T (what `finetune` runs today), each the best of `--reps`.

    .venv/bin/python bench/sft_rows.py [--tokens 225] [--rows 1 2 4] [--reps 3] [--model smollm2-135m-instruct]
    .venv/bin/python bench/sft_rows.py --tokens 250 --rows 2 4 --shared 36   # the shared-prefix plan, with and without

Prints sequence tokens per second per shape and the ratio to one row of T; the GEMM rate of the model's own
linears at M = T and M = R*T (bench/roofline.py) says how far from the machine's limit each shape runs.
"""

from __future__ import annotations

import argparse
import time

import torch


def _step_s(model, rows: int, tokens: int, reps: int, shared: int = 0, plan: bool = False) -> float:
    """The best forward+backward time of `rows` rows of `tokens`, the first `shared` the same in every row
    (a system prompt), computed once when `plan` (train/prefix.py, as `finetune` runs them)."""
    from legorl.train.logprobs import token_logprobs
    from legorl.train.prefix import plan_prefixes

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (rows, tokens), generator=g)
    ids[:, :shared] = ids[0, :shared]
    mask = torch.ones(rows, tokens)
    mask[:, : tokens // 2] = 0
    att = torch.ones_like(ids)
    best = float("inf")
    for _ in range(reps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        prefix = plan_prefixes(ids, att, ["demo"] * rows) if plan else None
        logp, _ = token_logprobs(model, ids, att, mask, prefix=prefix)
        (-(logp * mask).sum()).backward()
        best = min(best, time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=225, help="one transcript's length (the look-act demos: ~225)")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--shared", type=int, default=0,
                    help="tokens every row shares (the look-act system prompt: 36): rows with and without the "
                         "shared-prefix plan, instead of the packing comparison")
    a = ap.parse_args()
    import roofline as rl  # bench/ is on sys.path when this file runs as a script
    from transformers import AutoModelForCausalLM

    from legorl.models import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(a.model), dtype=torch.float32)
    model.train(False)
    threads = torch.get_num_threads()
    ms = sorted({1, a.tokens, *(r * a.tokens for r in a.rows), rl.CHUNK})  # the probe needs 1 and CHUNK
    limit = rl.probe(model, threads, ms=tuple(ms))
    body, head = limit["params"], limit["head_params"]

    def share(tok_s: float, m: int) -> str:
        """Linear FLOPs done / the linears' GEMM rate at M = m rows (forward 2, backward 4 per weight; the head
        runs at the trained half of the positions, its forward twice: it is recomputed in backward)."""
        flops = (6 * body + 4 * head) * tok_s
        return f"{flops / 1e9:.0f} GFLOP/s = {flops / (limit['gflops'][m] * 1e9):.0%} of the GEMM rate at M={m}"

    base = _step_s(model, 1, a.tokens, a.reps)
    print(f"{threads} threads; GEMM rate of the model's linears: "
          + ", ".join(f"M={m}: {g:.0f} GFLOP/s" for m, g in limit["gflops"].items() if m > 1))
    print(f"1 x {a.tokens} (today): {a.tokens / base:.0f} tok/s, {share(a.tokens / base, a.tokens)}")
    for r in a.rows:
        if r == 1:
            continue
        n = r * a.tokens
        if a.shared:
            plain = _step_s(model, r, a.tokens, a.reps, a.shared)
            planned = _step_s(model, r, a.tokens, a.reps, a.shared, plan=True)
            print(f"{r} x {a.tokens}, {a.shared} shared: {n / plain:.0f} tok/s; the prefix computed once: "
                  f"{n / planned:.0f} tok/s = {plain / planned:.2f}x")
            continue
        batched, packed = _step_s(model, r, a.tokens, a.reps), _step_s(model, 1, n, a.reps)
        print(f"{r} x {a.tokens}: {n / batched:.0f} tok/s = {base * r / batched:.2f}x today, {share(n / batched, n)}")
        print(f"1 x {n} (packed, no block mask: an upper bound): {n / packed:.0f} tok/s = {base * r / packed:.2f}x "
              f"today")


if __name__ == "__main__":
    main()
