"""The C decode-attention kernel (serving/embedded/decode_kernel.py) against the torch gather path: the same
attention on a real paged pool, the same generations through a real engine, and the fallbacks a user meets
(no compiler, a bf16 pool, a bad mode). Everything is real: the kernel is built with this machine's compiler."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import torch

from legorl.serving.embedded import EmbeddedEngine, decode_kernel
from legorl.serving.embedded.decode_kernel import KernelUnavailable, resolve
from legorl.serving.embedded.paged import StepBatch, active, paged_attention
from legorl.serving.types import GenerateRequest, SamplingParams

from .reference import hf_model, max_delta, prompt


class _Attn:
    config = None
    layer_idx = 1


def _pool_case(heads: int, kvh: int, d: int, lens: list[int], bs: int = 4, seed: int = 0):
    """A 2-layer pool whose blocks are handed out in shuffled order, and decode rows over it."""
    g = torch.Generator().manual_seed(seed)
    nblocks = sum(-(-n // bs) for n in lens) + 3
    k = torch.randn(2, kvh, (nblocks + 1) * bs, d, generator=g)
    v = torch.randn(2, kvh, (nblocks + 1) * bs, d, generator=g)
    order = torch.randperm(nblocks, generator=g).tolist()
    width = max(-(-n // bs) for n in lens)
    table = torch.full((len(lens), width), nblocks, dtype=torch.long)
    at = 0
    for i, n in enumerate(lens):
        nb = -(-n // bs)
        table[i, :nb] = torch.tensor(order[at: at + nb])
        at += nb
    lens_t = torch.tensor(lens)
    last = lens_t - 1  # each row's newest token is written by the step itself
    slots = table[torch.arange(len(lens)), last // bs] * bs + last % bs
    # HF hands attention [1, heads, T, d] views of [1, T, heads, d] tensors
    query = torch.randn(1, len(lens), heads, d, generator=g).transpose(1, 2)
    key = torch.randn(1, len(lens), kvh, d, generator=g).transpose(1, 2)
    value = torch.randn(1, len(lens), kvh, d, generator=g).transpose(1, 2)
    visible = torch.arange(width * bs)[None, :] < lens_t[:, None]
    mask = torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))[None, :, None, :]
    torch_step = StepBatch(k.clone(), v.clone(), bs, slots, n_dec=len(lens), dec_blocks=table.reshape(-1),
                           dec_mask=mask)
    kernel_step = StepBatch(k.clone(), v.clone(), bs, slots, n_dec=len(lens), dec_tables=table, dec_lens=lens_t)
    return query, key, value, torch_step, kernel_step


@pytest.mark.parametrize(("heads", "kvh", "d", "lens"), [
    (9, 3, 64, [1, 7, 33, 150, 4]),  # SmolLM2's GQA; a row of one token; rows ending mid-block
    (4, 4, 16, [5, 12, 8]),  # no GQA, full blocks
    (8, 1, 32, [40]),  # multi-query attention, one row
    (4, 2, 128, [19, 64]),  # head dim 128: the vectorised path's widest
    (6, 3, 40, [3, 27]),  # a head dim of an odd number of 8-float vectors
    (4, 2, 12, [9, 30]),  # not a multiple of 8 (and below, above 128): the scalar path
    (2, 1, 136, [17]),
])
def test_kernel_matches_the_torch_path_on_a_paged_pool(heads, kvh, d, lens):
    decode_kernel.load()
    query, key, value, torch_step, kernel_step = _pool_case(heads, kvh, d, lens)
    with active(torch_step):
        ref = paged_attention(_Attn(), query, key, value, None)[0]
    with active(kernel_step):
        got = paged_attention(_Attn(), query, key, value, None)[0]
    assert got.shape == ref.shape == (1, len(lens), heads, d)
    assert (got - ref).abs().max().item() < 1e-5
    # both wrote the step's K/V into the pool the same way
    assert torch.equal(torch_step.k, kernel_step.k) and torch_step.k[1].abs().sum() > 0
    # a one-token context attends to that token alone: the output is its value (GQA: the head's KV head)
    if lens[0] == 1:
        g = heads // kvh
        for h in range(heads):
            assert torch.allclose(got[0, 0, h], value[0, h // g, 0], atol=1e-6)


def test_a_sharp_softmax_is_as_accurate_as_torchs():
    """Scores ~100 apart (the vectorised exp's underflow to exactly 0): against a float64 reference, the kernel's
    error is within twice torch's fp32 path's (at these magnitudes a score's own fp32 rounding moves the output by
    ~1e-5 whatever the summation order)."""
    decode_kernel.load()
    query, key, value, torch_step, kernel_step = _pool_case(9, 3, 64, [70, 23])
    query = query * 40
    exact_step = StepBatch(torch_step.k.double(), torch_step.v.double(), torch_step.block_size, torch_step.write_slots,
                           n_dec=2, dec_blocks=torch_step.dec_blocks, dec_mask=torch_step.dec_mask.double())
    with active(exact_step):
        exact = paged_attention(_Attn(), query.double(), key.double(), value.double(), None)[0]
    with active(torch_step):
        ref = paged_attention(_Attn(), query, key, value, None)[0]
    with active(kernel_step):
        got = paged_attention(_Attn(), query, key, value, None)[0]
    torch_err, kernel_err = (ref - exact).abs().max().item(), (got - exact).abs().max().item()
    assert kernel_err <= 2 * torch_err + 1e-6, (kernel_err, torch_err)


def test_rows_split_over_threads_come_out_bit_for_bit_the_same():
    decode_kernel.load()
    lens = [3, 90, 17, 64, 1, 130, 40]
    query, _, _, _, step = _pool_case(9, 3, 64, lens)
    q = query[0].transpose(0, 1)  # [rows, heads, d], strided as in the engine
    outs = []
    for threads in (1, 2, 3, 16):  # 16 > rows: one row a thread at most
        out = torch.full((len(lens), 9, 64), float("nan"))
        decode_kernel.decode_attention(q, step.k[1], step.v[1], step.dec_tables, step.dec_lens, 4, 0.125, out, threads)
        outs.append(out)
    assert not outs[0].isnan().any()
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_kernel_rejects_a_context_longer_than_its_table():
    decode_kernel.load()
    query, key, value, _, step = _pool_case(9, 3, 64, [10, 20])
    step.dec_lens = torch.tensor([10, 10_000])
    with active(step), pytest.raises(RuntimeError, match="shape out of range"):
        paged_attention(_Attn(), query, key, value, None)


async def test_engine_generations_match_with_either_path(tiny_llama_dir):
    """Six sampled requests batched together (decode rows of different lengths over a shared prefix) and a greedy
    one: the kernel engine samples the same tokens as the torch engine, logprobs within 1e-5, and both match a
    teacher-forced HF forward."""
    model = hf_model(tiny_llama_dir)
    base = prompt(tiny_llama_dir, n_words=20)
    prompts = [base + prompt(tiny_llama_dir, "then", n_words=3 * i) for i in range(6)]
    sps = [SamplingParams(temperature=1.0, max_tokens=24, seed=i, ignore_eos=True) for i in range(6)]
    results = {}
    for mode in ("torch", "kernel"):
        eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0, decode_attention=mode)
        try:
            assert eng.decode_kernel == (mode == "kernel")
            outs = await asyncio.gather(*[eng.generate(GenerateRequest(p, sp)) for p, sp in zip(prompts, sps,
                                                                                                   strict=True)])
            greedy = await eng.generate(GenerateRequest(base, SamplingParams(temperature=0, max_tokens=24)))
        finally:
            await eng.close()
        results[mode] = (outs, greedy)
    (t_outs, t_greedy), (k_outs, k_greedy) = results["torch"], results["kernel"]
    assert k_greedy.token_ids == t_greedy.token_ids
    for p, a, b in zip(prompts, t_outs, k_outs, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
        assert max_delta(model, b, p, 1.0) < 1e-4


def test_modes_and_fallbacks(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="decode_attention must be one of auto, kernel, torch"):
        resolve("fast", torch.float32, torch.device("cpu"))
    assert resolve("torch", torch.float32, torch.device("cpu")) is False
    assert resolve("auto", torch.bfloat16, torch.device("cpu")) is False  # the kernel is fp32 only
    with pytest.raises(KernelUnavailable, match="fp32 KV pool on the CPU"):
        resolve("kernel", torch.bfloat16, torch.device("cpu"))
    assert resolve("auto", torch.float32, torch.device("cpu")) is True
    # no compiler on this machine: auto falls back to torch, kernel says what is missing
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))  # nothing built there yet
    decode_kernel._load.cache_clear()
    try:
        assert resolve("auto", torch.float32, torch.device("cpu")) is False
        with pytest.raises(KernelUnavailable, match="no C compiler"):
            resolve("kernel", torch.float32, torch.device("cpu"))
    finally:
        decode_kernel._load.cache_clear()


def test_a_failing_compile_is_reported_with_the_compiler_output(monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo fake-cc 1.0; exit 0; }\necho 'cc: boom' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    decode_kernel._load.cache_clear()
    try:
        with pytest.raises(KernelUnavailable, match="cc: boom"):
            decode_kernel.load()
    finally:
        decode_kernel._load.cache_clear()


def test_loading_the_kernel_leaves_the_process_floating_point_mode_alone():
    """`-ffast-math` at link time would add crtfastmath.o, which turns on flush-to-zero for the whole process
    (torch included) when the library loads: subnormal results must survive loading it."""
    code = ("import torch; from legorl.serving.embedded import decode_kernel; decode_kernel.load(); "
            "x = torch.tensor([1e-38], dtype=torch.float32) * torch.tensor([1e-3]); print(float(x[0]) > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
