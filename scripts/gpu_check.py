"""The GPU check (docs/trainer.md): the embedded engine and one trainer step on CUDA in bf16, configured
the way `legorl train` configures them, printing tok/s, peak GPU memory, MFU and the rollout/trainer
fidelity metrics as one JSON object (also written to $OUT/gpu_check.json when $OUT is set).

    python3 scripts/gpu_check.py --model DIR                 # a local HF model directory (SmolLM2-135M...)
    python3 scripts/gpu_check.py --tokenizer DIR             # no weights at hand (no network): a random model
                                                             # of SmolLM2-135M's architecture, that tokenizer
    python3 scripts/gpu_check.py --tokenizer DIR --device cpu --requests 4 --max-tokens 8   # a dry run here

Random weights measure speed, memory and rollout/trainer agreement, not learning.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import torch

# SmolLM2-135M's architecture (its config.json), for a seeded random-weight stand-in
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0)
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # dense, per GPU


def random_model(tokenizer_dir: Path, out: Path) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id))
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.05)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


async def rollouts(model_dir: Path, device: str, dtype: torch.dtype, n: int, max_tokens: int, kv_tokens: int):
    from legorl.models.chat import load_tokenizer
    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.types import GenerateRequest, SamplingParams
    from legorl.tasks.model import Task
    from legorl.trial import TrialResult, TrialSpec, TrialTokens

    tok = load_tokenizer(model_dir)
    engine = EmbeddedEngine.from_pretrained(model_dir, kv_budget_tokens=kv_tokens, device=device, dtype=dtype,
                                            max_num_seqs=n)
    await engine.start()
    try:
        texts = [tok.apply_chat_template([{"role": "user", "content": f"Task {i}: list the files, then count the "
                                           "lines of every Python file and write the total to out.txt."}],
                                         add_generation_prompt=True, tokenize=False) for i in range(n)]
        prompts = [list(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(engine.generate(GenerateRequest(
            p, SamplingParams(max_tokens=max_tokens, seed=i, ignore_eos=True))) for i, p in enumerate(prompts)))
        elapsed = time.perf_counter() - t0
    finally:
        await engine.close()
    trials = []
    for i, (p, o) in enumerate(zip(prompts, outs, strict=True)):
        ids = p + o.token_ids
        tokens = TrialTokens(ids, [0] * len(p) + [1] * len(o.token_ids), [0.0] * len(p) + list(o.logprobs))
        spec = TrialSpec(Task(f"t{i // 2}", Path("."), "x"), group_id=f"g{i // 4}", trial_id=f"r{i}")
        trials.append(TrialResult(spec, "passed" if i % 2 else "failed", "", float(i % 2), tokens))
    generated = sum(len(o.token_ids) for o in outs)
    return trials, {"engine/generated_tokens": generated, "engine/decode_tok_s": generated / elapsed,
                    "engine/wall_s": elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="a local HF model directory")
    ap.add_argument("--tokenizer", type=Path, help="without --model: the tokenizer for a random SmolLM2-135M")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible: run this on a GPU machine (or --device cpu for a dry run)")
    model_dir = args.model or random_model(args.tokenizer, Path("/tmp/legorl-gpu-check-model"))
    from legorl.config import load_config
    from legorl.train.batch import collate
    from legorl.train.build import build_trainer

    report: dict = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                    "torch": torch.__version__, "model": str(model_dir), "date": time.strftime("%Y-%m-%d")}
    trials, engine_metrics = asyncio.run(rollouts(model_dir, args.device, torch.bfloat16, args.requests,
                                                  args.max_tokens, args.requests * (args.max_tokens + 128)))
    report.update(engine_metrics)
    cfg = load_config(None, [f"model.path={model_dir}", f"trainer.device={args.device}", "trainer.dtype=bfloat16",
                             "serving.dtype=bfloat16", "trainer.lr=1e-6", "trainer.max_tokens_per_micro_batch=16384",
                             f"model.gradient_checkpointing={str(args.gradient_checkpointing).lower()}"])
    trainer = build_trainer(cfg, model_dir)
    batch = collate(trials, trainer.pad_id)
    tokens = int(batch.attention_mask.sum())
    params = sum(p.numel() for p in trainer.actor.model.parameters())
    cuda = args.device.startswith("cuda")
    times, metrics = [], {}
    for _ in range(args.reps):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        metrics = trainer.update(batch)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    best = min(times)
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in report["device"]), None)
    report.update({
        "trainer/tokens": tokens, "trainer/params": params, "trainer/step_s": best, "trainer/tok_s": tokens / best,
        # one forward + backward over every token: ~6 FLOPs per parameter per token (attention not counted)
        "trainer/mfu": (6 * params * tokens / best / peak) if peak else None,
        "trainer/peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        **{k: v for k, v in metrics.items() if k.startswith(("rollout_corr/", "actor/", "perf/"))},
    })
    text = json.dumps(report, indent=1, default=float)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.json").write_text(text)


if __name__ == "__main__":
    main()
