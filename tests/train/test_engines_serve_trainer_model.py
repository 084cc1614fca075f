"""`serving.share_trainer_model`: in a synchronous in-process run the replicas serve the trainer's model object
(one copy of the weights). What the trainer changes, they sample from once a weight sync has cleared their prefix
caches; the sync copies nothing; a checkpoint's config.json carries nothing of the engine; off (or LoRA, async),
the replicas load their own copy."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from legorl.config import load_config
from legorl.rundir import RunDir
from legorl.runtime.inprocess import InProcessRuntime
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.train.build import build_trainer
from legorl.train.loop import servable_model

PROMPTS = [[5 + i, 9, 17 + 3 * i, 4, 33, 2 + i] for i in range(4)]


def _cfg(tiny_llama_dir, *overrides: str):
    return load_config(None, [f"model.path={tiny_llama_dir}", "serving.kv_budget_tokens=2048", *overrides])


async def _sample(engines) -> list[tuple[list[int], list[float]]]:
    reqs = [GenerateRequest(p, SamplingParams(temperature=0.0, max_tokens=8)) for p in PROMPTS]
    outs = await asyncio.gather(*(e.generate(r) for r in reqs for e in engines))
    return [(o.token_ids, o.logprobs) for o in outs]


async def test_replicas_serve_the_trainers_model_and_follow_its_updates(tiny_llama_dir, tmp_path):
    cfg = _cfg(tiny_llama_dir, "serving.n_replicas=2")
    assert cfg.engines_serve_trainer_model()
    trainer = build_trainer(cfg, tiny_llama_dir)
    model = servable_model(cfg, trainer)
    assert model is trainer.actor.model
    rt = await InProcessRuntime.start(cfg, RunDir(tmp_path, "r"), model)
    try:
        a, b = rt.engines
        assert a.model is model and b.model is model
        before = await _sample([a, b])  # fills both prefix caches with the old weights' KV
        with torch.no_grad():  # what an update does: the trainer's parameters change in place
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.mul_(0.5)
        sync = WeightSync([a, b])
        await sync.push_stream(trainer.stream_weights)
        assert a.weight_version == b.weight_version == 1
        after = await _sample([a, b])
        own = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=2048, num_threads=1)
        try:  # an engine with its own copy of the updated weights samples the same
            await WeightSync([own]).push({k: v.detach().clone() for k, v in model.state_dict().items()})
            alone = await _sample([own])
        finally:
            await own.close()
        assert after != before
        for i, (ids, lps) in enumerate(alone):
            for ids_s, lps_s in after[2 * i: 2 * i + 2]:
                assert ids_s == ids and lps_s == pytest.approx(lps, abs=1e-5)
        out = tmp_path / "saved"
        model.save_pretrained(out)  # a checkpoint while the engines hold the model: a plain HF config
        assert not [k for k in json.loads((out / "config.json").read_text()) if "legorl" in k]
    finally:
        await rt.close()
        trainer.close()
    assert model.config._attn_implementation != "legorl_paged"  # the last engine gave the backend back


@pytest.mark.parametrize("overrides", [
    ["serving.share_trainer_model=false"],
    ["model.lora.rank=4"],
    ["async_training.enabled=true"],
    ["serving.placement=process"],
])
def test_only_a_synchronous_dense_full_weight_run_shares(tiny_llama_dir, overrides):
    assert not _cfg(tiny_llama_dir, *overrides).engines_serve_trainer_model()


def test_an_moe_trainer_model_is_not_served(tiny_moe_dir):
    cfg = _cfg(tiny_moe_dir)
    trainer = build_trainer(cfg, tiny_moe_dir)
    try:
        assert cfg.engines_serve_trainer_model() and servable_model(cfg, trainer) is None
    finally:
        trainer.close()


@pytest.mark.parametrize("share", [True, False])
async def test_a_run_logs_the_bytes_a_sync_moves(tiny_run_config, share):
    """`legorl train`'s step metrics: a sync over replicas that serve the trainer's own tensors moves no byte
    (`weight_sync/bytes` 0); replicas with their own copy get the whole weights."""
    from legorl.train.loop import train

    cfg = load_config(tiny_run_config("s", trainer={"total_steps": 1},
                                      serving={"n_replicas": 2, "share_trainer_model": share}))
    assert cfg.engines_serve_trainer_model() is share
    lines: list[str] = []
    [m] = await train(cfg, on_line=lines.append, progress=False)
    assert m["weight_version"] == 1.0
    assert any("serve the trainer's own model" in ln for ln in lines) is share
    if share:
        assert m["weight_sync/bytes"] == 0 and m["weight_sync/delta_share"] == 0
    else:
        assert m["weight_sync/bytes"] == _state_bytes(cfg.model.path) and m["weight_sync/delta_share"] == 1.0


def _state_bytes(path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(t.numel() * t.element_size() for t in AutoModelForCausalLM.from_pretrained(path).state_dict().values())
