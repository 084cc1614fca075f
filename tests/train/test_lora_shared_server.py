"""Two `legorl train` runs with different LoRA adapters share one `legorl serve --engine-api` (issue 32):
each run pushes only its own adapter and samples only with it. Both runs' step-2 rollouts are re-scored with
both runs' step-1 adapters: each matches its own to 1e-5 and is far from the other's, the check that would
catch one run sampling with the other's adapter."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from legorl.config import load_config
from legorl.proxy.cli import run_server
from legorl.train.lora import attach_lora, load_adapter

LORA = {"rank": 4, "alpha": 8, "init": "gaussian"}  # random B: the two runs' adapters differ from step 1


def policy_model(base_dir, adapter_file: Path):
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    attach_lora(model, load_config(None, ["model.lora.rank=4", "model.lora.alpha=8"]).model.lora)
    load_adapter(model, load_file(str(adapter_file)))
    return model


@torch.no_grad()
def mean_delta(model, branch: dict) -> float:
    ids = branch["token_ids"]
    logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
    pairs = [(lp, ref[i - 1]) for i, (m, lp) in enumerate(zip(branch["mask"], branch["logprobs"], strict=True))
             if m and i > 0]
    return sum(abs(a - b) for a, b in pairs) / len(pairs)


def step_branches(run: Path, name: str, step: int) -> list[dict]:
    out = []
    for f in sorted((run / "trials" / name / f"step_{step}").glob("*/proxy_trajectory.json")):
        out += [b for b in json.loads(f.read_text())["branches"] if sum(b["mask"])]
    return out


@pytest.mark.slow
async def test_two_runs_share_one_server(tmp_path, tiny_run_config, tiny_llama_dir):
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    server = asyncio.create_task(run_server(str(tiny_llama_dir), kv_budget_tokens=8192, ready=ready, stop=stop,
                                            engine_api=True))
    try:
        url = await asyncio.wait_for(ready, 120)
        cfg = tiny_run_config("x", model={"path": str(tiny_llama_dir), "lora": LORA},
                              serving={"engine": "remote", "remote": {"url": url}},
                              rollout={"max_turns": 1, "max_response_len": 8, "concurrency": 4,
                                       "max_prompt_len": 1024},
                              trainer={"lr": 1e-2, "train_batch_size": 2, "total_steps": 2, "save_freq": 1,
                                       "max_logprob_abs_diff": 1e-3})
        t0 = time.perf_counter()
        runs = {name: await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress", "--skip-preflight",
                    f"run.name={name}", f"run.seed={seed}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                for name, seed in (("a", 1), ("b", 2))}  # at the same time, against the same server
        for name, proc in runs.items():
            out, err = await asyncio.wait_for(proc.communicate(), 600)
            assert proc.returncode == 0, (name, out.decode()[-2000:], err.decode()[-3000:])
        wall = time.perf_counter() - t0
        async with aiohttp.ClientSession() as http, http.get(url + "/engine/info") as r:
            assert (await r.json())["adapters"] == {"a": 2, "b": 2}  # each run's own adapter, 2 syncs each
    finally:
        stop.set()
        await asyncio.wait_for(server, 60)

    root = tmp_path / "runs"
    models = {n: policy_model(tiny_llama_dir, root / n / "checkpoints" / "step_1" / "adapter.safetensors")
              for n in ("a", "b")}
    for name, other in (("a", "b"), ("b", "a")):
        metrics = [json.loads(line) for line in (root / name / "logs" / f"{name}.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [1, 2]
        assert all(m["rollout_corr/abs_diff_mean"] <= 1e-5 for m in metrics), name
        adapter_bytes = os.path.getsize(root / name / "checkpoints" / "step_1" / "adapter.safetensors")
        assert all(0 < m["weight_sync/bytes"] < adapter_bytes for m in metrics)  # the adapter only
        branches = step_branches(root / name, name, 2)
        assert branches and all(v == 1 for b in branches for v, m in zip(b["weight_versions"], b["mask"],
                                                                          strict=True) if m)
        own, cross = [mean_delta(models[name], b) for b in branches], [mean_delta(models[other], b) for b in branches]
        assert max(own) <= 1e-5 and min(cross) > 1e-4, (name, own, cross)  # the other run's adapter: caught
        toks = sum(m["response_length/mean"] * 4 for m in metrics)
        print(f"run {name}: own {max(own):.1e} other {min(cross):.1e}; {toks:.0f} sampled tokens, rollout {sum(m['timing/rollout_s'] for m in metrics):.1f} s, "
              f"steps {sum(m['timing/step_s'] for m in metrics):.1f} s; both runs' wall {wall:.1f} s")
