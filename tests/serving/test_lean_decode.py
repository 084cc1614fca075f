"""The lean decode forward (serving/embedded/lean.py): a one-thread engine with it generates bit for bit what the
same engine generates through the HF modules (token ids and logprobs), first and second turns, for the dense
architectures it takes; it declines the models it does not reproduce, and an engine with a LoRA adapter loaded keeps
the HF path. Real engines, real C kernels built with this machine's compiler, random-weight models."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config, Qwen3Config

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.embedded.lean import LeanDecoder
from legorl.serving.embedded.skinny_linear import resolve
from legorl.serving.types import GenerateRequest, SamplingParams

from .lora_helpers import lora_model, mean_delta
from .reference import hf_model, prompt

pytestmark = pytest.mark.skipif(not resolve("auto", torch.float32, torch.device("cpu"), 1),
                                reason="the lean path runs with the C kernels: AVX2 + FMA and a C compiler")

DIMS = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512)


def _model(config) -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


CONFIGS = {
    "llama": lambda: LlamaConfig(**DIMS),
    "llama-rope-scaled": lambda: LlamaConfig(**DIMS, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "qwen2": lambda: Qwen2Config(**DIMS),  # q/k/v with biases
    "qwen3": lambda: Qwen3Config(**DIMS),  # an RMSNorm over each head's q and k
}


async def _generate(model, lean: bool):
    eng = EmbeddedEngine(model, kv_budget_tokens=2048, seed=0, num_threads=1, lean_decode=lean)
    try:
        assert eng.linear_kernel and eng.decode_kernel
        gen = torch.Generator().manual_seed(1)
        prompts = [torch.randint(3, 500, (n,), generator=gen).tolist() for n in (5, 17, 40, 9, 23, 31)]
        sps = [SamplingParams(temperature=1.0, max_tokens=20, seed=i, ignore_eos=True) for i in range(6)]
        outs = await asyncio.gather(*[eng.generate(GenerateRequest(p, s)) for p, s in zip(prompts, sps, strict=True)])
        # second turns: each continues its cached first turn with 12 new tokens (chunks with a prefix), beside a
        # greedy row
        turns = [p + o.token_ids + torch.randint(3, 500, (12,), generator=gen).tolist()
                 for p, o in zip(prompts, outs, strict=True)]
        again = await asyncio.gather(
            *[eng.generate(GenerateRequest(p, s)) for p, s in zip(turns[:3], sps[:3], strict=True)],
            eng.generate(GenerateRequest(prompts[2], SamplingParams(temperature=0, max_tokens=12))))
        return [(o.token_ids, o.logprobs) for o in [*outs, *again]], eng.runner.lean_steps
    finally:
        await eng.close()


@pytest.mark.parametrize("arch", list(CONFIGS))
async def test_the_lean_path_generates_bit_for_bit_what_the_hf_path_does(arch):
    """Six sampled rows decoding together (steps of up to six rows, prompts of 5-40 tokens prefilled beside them),
    then three second turns and a greedy row, with the lean path and without: the same tokens and logprobs, exactly."""
    model = _model(CONFIGS[arch]())
    assert LeanDecoder.for_model(model) is not None
    with_lean, steps = await _generate(model, True)
    without, none = await _generate(model, False)
    assert none == 0 and steps >= 25  # the decode steps took it (steps with a prompt chunk keep the HF modules)
    assert with_lean == without


def test_it_declines_models_it_does_not_reproduce(tiny_moe_dir):
    assert LeanDecoder.for_model(hf_model(tiny_moe_dir)) is None  # MoE: routed experts, R3 recording
    assert LeanDecoder.for_model(_model(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=512))) is None
    sliding = Qwen2Config(**DIMS, use_sliding_window=True, sliding_window=64, max_window_layers=0)
    assert LeanDecoder.for_model(_model(sliding)) is None


async def test_an_engine_off_the_kernels_or_with_an_adapter_keeps_the_hf_path(tiny_llama_dir):
    """Two threads (BLAS linears): no lean path at all. A LoRA adapter loaded: its rows' steps run the HF modules
    (where the adapter's hooks are), and their logprobs are the adapter model's."""
    two = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=2048, seed=0, num_threads=2)
    try:
        assert two.runner.lean is None
    finally:
        await two.close()
    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=2048, seed=0, num_threads=1)
    try:
        assert eng.runner.lean is not None
        adapted, state = lora_model(tiny_llama_dir, 1)
        await eng.load_adapter("a", state, version=1)
        ids = prompt(tiny_llama_dir, n_words=4)
        sp = SamplingParams(temperature=1.0, max_tokens=16, seed=0, ignore_eos=True)
        outs = await asyncio.gather(*[eng.generate(GenerateRequest(ids, sp, adapter=n)) for n in ("a", None)])
        assert eng.runner.lean_steps == 0
        assert mean_delta(adapted, ids, outs[0]) <= 1e-5
        assert mean_delta(hf_model(tiny_llama_dir), ids, outs[1]) <= 1e-5
    finally:
        await eng.close()
