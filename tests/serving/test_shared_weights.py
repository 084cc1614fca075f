"""Thread replicas that serve one copy of the weights (`create_pool(share_weights=True)`, what `legorl train`
asks for without LoRA): one model object, an own KV pool and thread each; concurrent forwards on it give what a
replica with its own weights gives, a weight sync reaches every sharer, and LoRA / MoE keep copies."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from legorl.config import load_config
from legorl.rundir import RunDir
from legorl.runtime.inprocess import InProcessRuntime, PolicySpec
from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.pool_manager import create_pool
from legorl.serving.types import GenerateRequest, InvalidRequestError, SamplingParams
from legorl.serving.weight_sync import WeightSync
from legorl.workers.config import WorkerConfig

KW = {"kv_budget_tokens": 2048, "num_threads": 1}
PROMPTS = [[5 + i, 9, 17 + 3 * i, 4, 33, 2 + i] for i in range(6)]


def _greedy(prompt: list[int], n: int = 12) -> GenerateRequest:
    return GenerateRequest(prompt, SamplingParams(temperature=0.0, max_tokens=n))


async def _outputs(engines, prompts) -> list[tuple[list[int], list[float]]]:
    """Every prompt on every engine at once (the sharers' threads run forwards on one model concurrently)."""
    outs = await asyncio.gather(*(e.generate(_greedy(p)) for p in prompts for e in engines))
    return [(o.token_ids, o.logprobs) for o in outs]


async def test_sharers_serve_one_model_and_match_a_replica_with_its_own(tiny_llama_dir):
    pool = await create_pool(tiny_llama_dir, 2, engine_kwargs=KW, share_weights=True)
    own = EmbeddedEngine.from_pretrained(tiny_llama_dir, **KW)
    try:
        a, b = pool.engines()
        assert a.model is b.model and a.shares_weights and b.shares_weights and a.pool is not b.pool
        shared = await _outputs([a, b], PROMPTS)
        alone = await _outputs([own], PROMPTS)
        for i, (ids, lps) in enumerate(alone):  # each prompt ran on a and on b
            for ids_s, lps_s in shared[2 * i: 2 * i + 2]:
                assert ids_s == ids
                assert lps_s == pytest.approx(lps, abs=1e-5)

        # a full-weight sync reaches both (each copies the same values into the one model)
        state = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).state_dict()
        state = {k: v * 0.5 for k, v in state.items() if k.endswith("norm.weight")}
        await WeightSync([a, b]).push(state)
        await WeightSync([own]).push(state)
        assert a.weight_version == b.weight_version == 1
        after = await _outputs([a, b], PROMPTS[:2])
        assert [x[0] for x in after] == [x[0] for x in await _outputs([own], PROMPTS[:2]) for _ in (0, 1)]
        assert after != shared[:4]  # the halved norms changed what they sample
    finally:
        await own.close()
        for e in pool.engines():
            await e.close()


async def test_a_sharer_refuses_lora_and_moe_keeps_a_copy_each(tiny_llama_dir, tiny_moe_dir):
    pool = await create_pool(tiny_llama_dir, 2, engine_kwargs=KW, share_weights=True)
    try:
        a = pool.engines()[0]
        lora = {"model.layers.0.self_attn.q_proj.lora_A": torch.zeros(2, 8)}
        with pytest.raises(InvalidRequestError, match="shares its weights"):
            await a.update_weights(lora, 1)
        with pytest.raises(InvalidRequestError, match="shares its weights"):
            await a.load_adapter("x", lora, 1)
    finally:
        for e in pool.engines():
            await e.close()
    moe = await create_pool(tiny_moe_dir, 2, engine_kwargs=KW, share_weights=True)
    try:
        a, b = moe.engines()
        assert a.model is not b.model and not a.shares_weights and not b.shares_weights
    finally:
        for e in moe.engines():
            await e.close()


@pytest.mark.parametrize(("overrides", "shared"), [
    (["serving.n_replicas=2"], True),
    (["serving.n_replicas=2", "model.lora.rank=4"], False),  # the run's adapter is merged into each replica
])
async def test_a_run_config_shares_unless_lora(tiny_llama_dir, tmp_path, overrides, shared):
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "serving.kv_budget_tokens=2048", *overrides])
    rt = await InProcessRuntime.start(cfg, RunDir(tmp_path, "r"))
    try:
        a, b = rt.engines
        assert (a.model is b.model) is shared
    finally:
        await rt.close()


async def test_eval_policy_replicas_share_the_weights(tiny_llama_dir, tmp_path):
    """`legorl eval --config` passes the run's serving.n_replicas (workers/cli.py) into this spec."""
    rt = await InProcessRuntime.for_policy(PolicySpec(model=str(tiny_llama_dir), kv_budget_tokens=2048, n_replicas=2),
                                           WorkerConfig(output_root=tmp_path, exp_name="e"))
    try:
        a, b = rt.engines
        assert a.model is b.model
    finally:
        await rt.close()
