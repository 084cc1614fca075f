"""Full fine-tuning beside LoRA on the demo's step, each in a fresh subprocess, side by side from one run.

    .venv/bin/python bench/lora.py [--model smollm2-135m-instruct] [--groups 8 --group-size 4]
                                   [--prompt 134 --response 22] [--rank 8] [--reps 2]

Per mode: the update (one trainer step on a demo-shaped GRPO batch, fp32, the best of `--reps`), the peak RSS
above the loaded model during it (/proc VmHWM reset), the optimizer state, one weight sync into a real
embedded engine (bytes and seconds), and the checkpoint on disk. The LoRA child also times the engine's
decode with the adapter merged into its weights against the adapter applied in the forward (hooks), the
choice serving/embedded/lora.py made. Prints `sync bytes full/lora: N`, `update time full/lora: N`, ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from legorl.config import load_config
from legorl.models import resolve_model
from legorl.train.build import build_trainer
from legorl.train.steps import learn

sys.path.insert(0, str(Path(__file__).parent))
from train import grouped_batch


def kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


async def decode_time(engine, n: int, tokens: int) -> float:
    from legorl.serving.types import GenerateRequest, SamplingParams

    reqs = [GenerateRequest(list(range(10 + i, 60 + i)), SamplingParams(temperature=0.0, max_tokens=tokens,
                                                                          ignore_eos=True)) for i in range(n)]
    t0 = time.perf_counter()
    await asyncio.gather(*(engine.generate(r) for r in reqs))
    return time.perf_counter() - t0


async def child(args) -> dict:
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.weight_sync import WeightSync

    path = resolve_model(args.model)
    lora = args.child == "lora"
    over = [f"model.path={args.model}", "trainer.micro_batch_size=4"]
    over += [f"model.lora.rank={args.rank}", f"model.lora.alpha={2 * args.rank}", "trainer.lr=3e-4"] if lora \
        else ["trainer.lr=3e-5"]
    trainer = build_trainer(load_config(None, over), path)
    batch = grouped_batch(args, trainer.actor.model.config.vocab_size)
    out: dict = {}
    base_kb = kb("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        learn(trainer, batch)
        times.append(time.perf_counter() - t0)
    out["update_s"] = min(times)
    out["peak_mb"] = (kb("VmHWM:") - base_kb) / 1024
    out["optim_mb"] = sum(v.numel() * v.element_size() for s in trainer.actor.optimizer.state.values()
                          for v in s.values() if torch.is_tensor(v)) / 2**20
    engine = EmbeddedEngine.from_pretrained(path, kv_budget_tokens=8192, num_threads=torch.get_num_threads())
    try:
        sync = WeightSync([engine])
        await sync.push_stream(trainer.stream_weights)  # first: the engine copies the base weights it merges onto
        t0 = time.perf_counter()
        await sync.push_stream(trainer.stream_weights)
        out["sync_s"], out["sync_bytes"] = time.perf_counter() - t0, sync.last_bytes
        if lora:
            out["decode_merged_s"] = await decode_time(engine, args.decode_requests, args.decode_tokens)
    finally:
        await engine.close()
    if lora:  # the same adapter applied in the forward instead: hooks on the engine's Linear layers
        from transformers import AutoModelForCausalLM

        from legorl.train.lora import adapter_state, attach_lora, load_adapter

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        attach_lora(model, load_config(None, over).model.lora)
        load_adapter(model, adapter_state(trainer.actor.model))
        engine = EmbeddedEngine(model.eval(), kv_budget_tokens=8192)
        try:
            out["decode_forward_s"] = await decode_time(engine, args.decode_requests, args.decode_tokens)
        finally:
            await engine.close()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        trainer.save(Path(d))
        out["ckpt_s"] = time.perf_counter() - t0
        out["ckpt_bytes"] = sum(f.stat().st_size for f in Path(d).rglob("*") if f.is_file())
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompt", type=int, default=134)
    p.add_argument("--response", type=int, default=22)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--decode-requests", type=int, default=8)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--child", choices=["full", "lora"])
    p.set_defaults(system=0)  # grouped_batch: no prefix shared across groups
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    res = {}
    for mode in ("full", "lora"):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", mode]
        run = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res[mode] = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{mode}: {json.dumps(res[mode])}", flush=True)
    f, lo = res["full"], res["lora"]
    print(f"sync bytes full/lora: {f['sync_bytes'] / lo['sync_bytes']:.1f}  ({f['sync_bytes']} vs {lo['sync_bytes']})")
    print(f"sync time full/lora: {f['sync_s'] / lo['sync_s']:.1f}  ({f['sync_s']:.3f} s vs {lo['sync_s']:.3f} s)")
    print(f"update time full/lora: {f['update_s'] / lo['update_s']:.2f}  ({f['update_s']:.1f} s vs "
          f"{lo['update_s']:.1f} s)")
    print(f"peak memory full/lora: {f['peak_mb'] / max(lo['peak_mb'], 1):.2f}  ({f['peak_mb']:.0f} MB vs "
          f"{lo['peak_mb']:.0f} MB above the loaded model)")
    print(f"optimizer state full/lora: {f['optim_mb'] / lo['optim_mb']:.1f}  ({f['optim_mb']:.1f} MB vs "
          f"{lo['optim_mb']:.2f} MB)")
    print(f"checkpoint full/lora: {f['ckpt_bytes'] / lo['ckpt_bytes']:.1f}  ({f['ckpt_bytes']} vs "
          f"{lo['ckpt_bytes']} bytes; save {f['ckpt_s']:.2f} s vs {lo['ckpt_s']:.2f} s)")
    print(f"engine decode in-forward/merged: {lo['decode_forward_s'] / lo['decode_merged_s']:.2f}  "
          f"({lo['decode_forward_s']:.2f} s vs {lo['decode_merged_s']:.2f} s for {args.decode_requests} x "
          f"{args.decode_tokens} tokens)")


if __name__ == "__main__":
    main()
