"""`serving.engine = "remote"`: the run's `RemoteEngine` against a real `legorl serve --engine-api` (in this
process, real HTTP): adapter-only loads tagged with the version, generations and prompt logprobs under the
run's adapter, loud failures, abort."""

from __future__ import annotations

import asyncio
import socket

import pytest

from legorl.config import ConfigError, load_config
from legorl.proxy.cli import run_server
from legorl.serving.remote.engine import RemoteEngine
from legorl.serving.types import EngineError, GenerateRequest, InvalidRequestError, SamplingParams

from .lora_helpers import lora_model, mean_delta
from .reference import hf_model, prompt, teacher_forced


@pytest.fixture
async def server_url(tiny_llama_dir):
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(str(tiny_llama_dir), kv_budget_tokens=4096, ready=ready, stop=stop,
                                          engine_api=True))
    yield await asyncio.wait_for(ready, 120)
    stop.set()
    await asyncio.wait_for(task, 60)


async def test_remote_engine_serves_only_its_adapter(server_url, tiny_llama_dir):
    ma, sa = lora_model(tiny_llama_dir, 1)
    eng = await RemoteEngine.attach(server_url, "run-a")
    other = await RemoteEngine.attach(server_url, "run-b")
    try:
        assert eng.weight_version == 0 and eng.max_model_len == 2048
        with pytest.raises(ValueError, match=r"model\.lora\.rank"):  # base weights never go to a shared server
            await eng.update_weights(dict(hf_model(tiny_llama_dir).state_dict()), 1)
        ids = prompt(tiny_llama_dir)
        sp = SamplingParams(temperature=1.0, max_tokens=12, seed=3, ignore_eos=True)
        with pytest.raises(InvalidRequestError, match="unknown adapter 'run-a'"):  # nothing loaded yet: loud
            await eng.generate(GenerateRequest(ids, sp))
        await eng.update_weights(sa, 1)
        assert eng.weight_version == 1
        out = await eng.generate(GenerateRequest(ids, sp))
        assert out.weight_version == 1 and mean_delta(ma, ids, out) <= 1e-5
        lps = (await eng.prompt_logprobs(ids + out.token_ids))[1:]
        ref = teacher_forced(ma, ids + out.token_ids)
        assert sum(abs(a - b) for a, b in zip(lps, ref, strict=True)) / len(ref) <= 1e-5
        with pytest.raises(InvalidRequestError, match="lacks"):  # a bad load fails the sync; the old one stays
            await eng.update_weights({k: v for k, v in sa.items() if not k.endswith("lora_B")}, 2)
        assert eng.weight_version == 1
        assert (await eng.generate(GenerateRequest(ids, sp))).token_ids == out.token_ids
        with pytest.raises(InvalidRequestError, match="unknown adapter 'run-b'; this engine holds: run-a"):
            await other.generate(GenerateRequest(ids, sp))  # run b never borrows run a's adapter

        req = GenerateRequest(ids, SamplingParams(max_tokens=1500, ignore_eos=True))
        long = asyncio.create_task(eng.generate(req))
        while (cut := await eng.abort(req.request_id)) is None and not long.done():
            await asyncio.sleep(0.05)  # until the server has it
        res = await long
        assert cut is not None and res.finish_reason == "abort" and 0 < len(res.token_ids) < 1500
    finally:
        await eng.close()
        await other.close()


async def test_attach_fails_loudly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match="cannot reach the server"):
        await RemoteEngine.attach(f"http://127.0.0.1:{port}", "a", timeout_s=5)


def test_remote_engine_config_names_what_to_fix():
    with pytest.raises(ConfigError, match=r"model\.lora\.rank"):
        load_config(None, ["serving.engine=remote", "serving.remote.url=http://127.0.0.1:1"])
    with pytest.raises(ConfigError, match=r"serving\.remote\.url"):
        load_config(None, ["serving.engine=remote", "model.lora.rank=4"])
    with pytest.raises(ConfigError, match=r"serving\.engine is not 'remote'"):
        load_config(None, ["serving.remote.url=http://x"])
