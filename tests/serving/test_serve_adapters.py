"""`legorl serve --adapter NAME=DIR` (and `serving.adapters` in `--config`): a request picks an adapter by its
`model` in all three APIs, with the official clients; each reply's logprobs are its adapter's; an unknown
model is a 404 listing the names there are; `/v1/models` lists them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest

from .lora_helpers import lora_model, mean_delta_record, peft_dir
from .reference import hf_model


def start_serve(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "legorl.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = proc.stdout.readline()
    if "legorl serve: model" not in first:
        proc.kill()
        raise AssertionError(first + proc.stderr.read()[-3000:])
    return proc, first.split(" on ")[1].strip()


async def test_serve_picks_the_adapter_by_model_in_every_api(tiny_llama_dir, tmp_path):
    (ma, sa), (mb, sb) = lora_model(tiny_llama_dir, 1), lora_model(tiny_llama_dir, 2)
    dir_a, dir_b = peft_dir(sa, tiny_llama_dir, tmp_path / "a"), peft_dir(sb, tiny_llama_dir, tmp_path / "b")
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'[serving.adapters]\na = "{dir_a}"\n')  # one from the config, one from the flag
    base_name = Path(tiny_llama_dir).name
    proc, url = start_serve("--model", str(tiny_llama_dir), "--kv-budget-tokens", "4096", "--config", str(cfg),
                            "--adapter", f"b={dir_b}", "--trajectories", str(tmp_path / "traj"))
    try:
        sids = {}
        async with aiohttp.ClientSession() as http:
            for api in ("chat", "responses", "messages"):
                async with http.post(url + "/sessions") as r:
                    sids[api] = await r.json()
            oa = {k: openai.AsyncOpenAI(base_url=v["openai_base_url"], api_key="x", max_retries=0)
                  for k, v in sids.items()}
            an = anthropic.AsyncAnthropic(base_url=sids["messages"]["anthropic_base_url"], api_key="x", max_retries=0)
            assert [m.id for m in (await oa["chat"].models.list()).data] == [base_name, "a", "b"]
            msgs = [{"role": "user", "content": "write a bash command"}]
            await asyncio.gather(  # concurrent: the three share the engine's steps
                oa["chat"].chat.completions.create(model="a", messages=msgs, max_tokens=8, seed=1),
                oa["responses"].responses.create(model="b", input="write a bash command", max_output_tokens=8),
                an.messages.create(model=base_name, messages=msgs, max_tokens=8),
            )
            with pytest.raises(openai.NotFoundError, match=rf"'c' does not exist here; use one of: {base_name}, a, b"):
                await oa["chat"].chat.completions.create(model="c", messages=msgs, max_tokens=2)
            with pytest.raises(openai.NotFoundError, match="use one of"):
                await oa["responses"].responses.create(model="c", input="x", max_output_tokens=2)
            with pytest.raises(anthropic.NotFoundError, match="use one of"):
                await an.messages.create(model="c", messages=msgs, max_tokens=2)
            for s in sids.values():
                async with http.delete(f"{url}/sessions/{s['session_id']}") as r:
                    assert r.status == 200
        models = {"chat": ma, "responses": mb, "messages": hf_model(tiny_llama_dir)}
        wrong = {"chat": mb, "responses": ma, "messages": ma}
        for api, s in sids.items():
            rec = json.loads((tmp_path / "traj" / s["session_id"] / "proxy_trajectory.json").read_text())
            (branch,) = rec["branches"]  # the refused calls left no branch behind
            assert sum(branch["mask"]) > 0
            assert mean_delta_record(models[api], branch) <= 1e-5, api
            assert mean_delta_record(wrong[api], branch) > 1e-3, api
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_serve_refuses_a_bad_adapter_in_one_line(tiny_llama_dir, tmp_path):
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "serve", "--model", str(tiny_llama_dir),
                          "--adapter", f"a={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "is not a PEFT adapter directory" in res.stderr, res.stderr[-2000:]
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "serve", "--model", str(tiny_llama_dir),
                          "--adapter", "nodir"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "use NAME=DIR" in res.stderr, res.stderr[-2000:]
    _, sa = lora_model(tiny_llama_dir, 1)  # an adapter of another model: a layer this one lacks
    other = {k.replace("layers.0.", "layers.9."): v for k, v in sa.items() if "layers.0." in k}
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "serve", "--model", str(tiny_llama_dir), "--adapter",
                          f"x={peft_dir(other, tiny_llama_dir, tmp_path / 'x')}"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2 and "--adapter x:" in res.stderr and "not a Linear" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
