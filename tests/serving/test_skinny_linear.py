"""The few-row linear kernel (serving/embedded/skinny_linear.py) against torch's: the same products at every shape
it takes, a row's result independent of its step's other rows, only few-row no-grad fp32 calls routed to it, the
same generations through a real one-thread engine, and the modes a user meets. The kernel is built for real with
this machine's compiler."""

from __future__ import annotations

import asyncio

import pytest
import torch
import torch.nn.functional as F

from legorl.serving.embedded import EmbeddedEngine, skinny_linear
from legorl.serving.embedded.decode_kernel import KernelUnavailable
from legorl.serving.embedded.skinny_linear import MAX_ROWS, few_row_linears, resolve
from legorl.serving.types import GenerateRequest, SamplingParams

from .reference import hf_model, max_delta, prompt

pytestmark = pytest.mark.skipif(not resolve("auto", torch.float32, torch.device("cpu"), 1),
                                reason="the kernel needs AVX2 + FMA and a C compiler")


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 14, MAX_ROWS])
@pytest.mark.parametrize(("n", "k"), [(1, 8), (2, 64), (3, 576), (7, 1536), (193, 576)])
def test_the_kernel_computes_torchs_linear(rows, n, k):
    g = torch.Generator().manual_seed(rows * 1000 + n)
    x, w, b = torch.randn(2, rows, k, generator=g)[0], torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    with torch.no_grad():
        got, want = skinny_linear.skinny_linear(x, w, b), F.linear(x, w, b)
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-5 * max(1.0, float(want.abs().max()))


def test_a_rows_result_does_not_depend_on_the_other_rows():
    """Bit for bit: a token's logits are the same whether it decodes alone or among MAX_ROWS rows."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(MAX_ROWS, 576, generator=g), torch.randn(193, 576, generator=g)
    together = skinny_linear.skinny_linear(x, w)
    for r in (0, 5, MAX_ROWS - 1):
        assert torch.equal(skinny_linear.skinny_linear(x[r: r + 1], w)[0], together[r])


def test_only_few_row_fp32_inference_calls_take_the_kernel(monkeypatch):
    taken: list[tuple[int, ...]] = []
    real = skinny_linear.skinny_linear
    monkeypatch.setattr(skinny_linear, "skinny_linear", lambda x, w, b=None: taken.append(tuple(x.shape)) or real(x, w, b))
    w = torch.randn(24, 64)
    with torch.no_grad(), few_row_linears(True, 16):
        F.linear(torch.randn(1, 16, 64), w)  # taken: 16 rows
        F.linear(torch.randn(MAX_ROWS + 1, 64), w)  # more rows than MAX_ROWS
        F.linear(torch.randn(4, 60), torch.randn(24, 60))  # K not a multiple of 8
        F.linear(torch.randn(4, 64, dtype=torch.float64), w.double())
        F.linear(torch.randn(4, 64), w.t().contiguous().t())  # a strided weight
        torch.nn.Linear(64, 24)(torch.randn(2, 64))  # a module's forward: taken
        F.linear(input=torch.randn(3, 64), weight=w, bias=torch.zeros(24))  # by keyword: taken
    with few_row_linears(True, 16):
        F.linear(torch.randn(4, 64), w)  # autograd on: the trainer's kind of call
    with torch.no_grad(), few_row_linears(True, MAX_ROWS + 1):  # a long step: no mode at all
        F.linear(torch.randn(4, 64), w)
    with torch.no_grad(), few_row_linears(False, 4):
        F.linear(torch.randn(4, 64), w)
    assert taken == [(1, 16, 64), (2, 64), (3, 64)]


async def test_a_one_thread_engine_keeps_its_logprobs_exact_with_the_kernel(tiny_llama_dir, monkeypatch):
    """Six sampled requests batched together (decode steps of up to 6 rows) and a greedy one through a one-thread
    engine with the kernel: every logprob matches a teacher-forced HF forward as closely as with BLAS, and greedy
    decoding picks the same tokens. (Sampled tokens are not compared across the two paths: on a random model's
    near-uniform distribution a 1e-7 change moves a draw to the neighbouring token, and the rows diverge.)"""
    model = hf_model(tiny_llama_dir)
    base = prompt(tiny_llama_dir, n_words=20)
    prompts = [base + prompt(tiny_llama_dir, "then", n_words=3 * i) for i in range(6)]
    sps = [SamplingParams(temperature=1.0, max_tokens=24, seed=i, ignore_eos=True) for i in range(6)]
    deltas, greedy, calls = {}, {}, []
    real = skinny_linear.skinny_linear
    monkeypatch.setattr(skinny_linear, "skinny_linear", lambda x, w, b=None: calls.append(1) or real(x, w, b))
    for mode in ("torch", "kernel"):
        eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=4096, seed=0, num_threads=1,
                                             decode_linear=mode)
        try:
            assert eng.linear_kernel == (mode == "kernel")
            outs = await asyncio.gather(*[eng.generate(GenerateRequest(p, sp)) for p, sp in zip(prompts, sps,
                                                                                                   strict=True)])
            greedy[mode] = (await eng.generate(GenerateRequest(base, SamplingParams(temperature=0, max_tokens=24))))
        finally:
            await eng.close()
        deltas[mode] = max(max_delta(model, o, p, 1.0) for o, p in zip(outs, prompts, strict=True))
        if mode == "torch":
            assert not calls
    # the decode steps' linears ran in the kernel: 2 layers x 7 linears + the head, each step
    assert len(calls) >= 15 * 24
    assert greedy["kernel"].token_ids == greedy["torch"].token_ids
    assert max_delta(model, greedy["kernel"], base, 0.0) < 1e-5
    assert deltas["kernel"] < 1e-5 and deltas["torch"] < 1e-5, deltas


def test_modes():
    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="decode_linear must be one of auto, kernel, torch"):
        resolve("fast", torch.float32, cpu, 1)
    assert resolve("torch", torch.float32, cpu, 1) is False
    assert resolve("auto", torch.float32, cpu, 1) is True
    assert resolve("auto", torch.float32, cpu, 2) is False  # the kernel is one thread: BLAS splits the work
    assert resolve("auto", torch.bfloat16, cpu, 1) is False
    with pytest.raises(KernelUnavailable, match="one-thread engine"):
        resolve("kernel", torch.float32, cpu, 2)


def test_preflight_says_which_path_the_config_takes():
    """From the demo's config (two one-thread replicas): the kernel; with two threads a replica, BLAS; `kernel`
    where it cannot run refuses the run."""
    from pathlib import Path

    from legorl.config import load_config
    from legorl.ops.preflight import check_decode_attention

    example = str(Path(__file__).resolve().parents[2] / "examples" / "agent-lookact.toml")

    def lines(*overrides: str) -> list[tuple[str, str]]:
        return [(r.level, r.message) for r in check_decode_attention(load_config(example, list(overrides)))]

    assert any(lv == "PASS" and m.startswith("decode steps' linears: the C kernel (serving.decode_linear)")
               and "skip the HF modules" in m for lv, m in lines())
    assert any(lv == "PASS" and "linears: BLAS" in m for lv, m in lines("serving.threads_per_replica=2"))
    assert any(lv == "FATAL" and "decode_linear = kernel cannot run here" in m
               for lv, m in lines("serving.threads_per_replica=2", "serving.decode_linear=kernel"))
