"""Sessions and calls are bounded, through the run config: `legorl serve --config` and `legorl train`'s runtime."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import aiohttp
import tomli_w

from legorl.config import load_config
from legorl.rundir import RunDir
from legorl.runtime.inprocess import InProcessRuntime


async def test_serve_config_bounds_sessions_and_calls(tiny_llama_dir, tmp_path):
    cfg = tmp_path / "serve.toml"
    cfg.write_text(tomli_w.dumps({"serving": {"proxy": {"session_idle_ttl_sec": 1.0, "max_sessions": 10,
                                                        "default_max_tokens": 3}}}))
    cmd = [sys.executable, "-m", "legorl.cli", "serve", "--model", str(tiny_llama_dir), "--kv-budget-tokens", "2048",
           "--trajectories", str(tmp_path / "traj"), "--config", str(cfg), "--max-sessions", "3"]  # the flag wins
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 120)
        url = line.split(" on ")[-1].strip()
        async with aiohttp.ClientSession() as http:
            sids = []
            for _ in range(3):
                async with http.post(url + "/sessions") as r:
                    assert r.status == 200
                    sids.append((await r.json())["session_id"])
            async with http.post(url + "/sessions") as r:  # over the cap
                err = await r.json()
                assert r.status == 429 and "max_sessions" in err["error"]["message"], err
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": None, "ignore_eos": True}
            async with http.post(url + "/v1/messages", json={**body, "max_tokens": 2}) as r:
                assert r.status == 429  # a bare call opens a session too
            for _ in range(2):  # a session in use stays open
                async with http.post(url + "/v1/chat/completions", json=body, headers={"X-Session-ID": sids[0]}) as r:
                    out = await r.json()
                assert r.status == 200 and out["usage"]["completion_tokens"] == 3  # the config's default cap
            last = time.monotonic()
            while True:  # idle sessions close once the TTL has passed
                async with http.get(url + "/health") as r:
                    open_now = (await r.json())["sessions"]
                if open_now == 0 or time.monotonic() - last > 15:
                    break
                await asyncio.sleep(0.1)
            assert open_now == 0 and time.monotonic() - last >= 0.9
            async with http.post(url + "/v1/chat/completions", json=body, headers={"X-Session-ID": sids[0]}) as r:
                assert r.status == 404  # expired: closed, its trajectory written
            async with http.post(url + "/sessions") as r:
                assert r.status == 200
        assert all((tmp_path / "traj" / sid / "proxy_trajectory.json").is_file() for sid in sids)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


async def test_train_runtime_takes_the_proxy_section(tiny_run_config, tmp_path):
    path = tiny_run_config("limits", serving={"kv_budget_tokens": 2048, "proxy": {
        "default_max_tokens": 5, "max_body_bytes": 4096, "large_body_bytes": 2048, "max_sessions": 7}})
    cfg = load_config(path)
    runtime = await InProcessRuntime.start(cfg, RunDir.of(cfg.run.output_dir, cfg.run.name))
    try:
        proxy = runtime.server.proxy
        s = proxy.open_session()
        body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
        async with aiohttp.ClientSession() as http:
            async with http.post(s.openai_base_url + "/chat/completions", json=body) as r:
                assert (await r.json())["usage"]["completion_tokens"] == 5
            async with http.post(s.openai_base_url + "/chat/completions",
                                 json={**body, "messages": [{"role": "user", "content": "x" * 5000}]}) as r:
                assert r.status == 413 and "4096" in (await r.json())["error"]["message"]
        assert proxy.config.max_sessions == 7
    finally:
        await runtime.close()
