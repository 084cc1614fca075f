"""`legorl serve`: management routes, bare routes keyed by X-Session-ID, trajectories, Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import aiohttp

from legorl.proxy.cli import run_server


async def test_serve_routes(tiny_llama_dir, tmp_path):
    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(str(tiny_llama_dir), trajectories=tmp_path, kv_budget_tokens=4096,
                                          ready=ready, stop=stop))
    url = await asyncio.wait_for(ready, 120)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/sessions") as r:
            info = await r.json()
        assert set(info) == {"session_id", "openai_base_url", "anthropic_base_url"}
        sid = info["session_id"]
        async with http.post(info["openai_base_url"] + "/chat/completions", json=body) as r:
            reply = (await r.json())["choices"][0]["message"]
        more = {**body, "messages": [*body["messages"], reply, {"role": "user", "content": "more"}]}
        async with http.post(url + "/v1/chat/completions", json=more, headers={"X-Session-ID": sid}) as r:
            assert r.status == 200
        async with http.post(url + "/v1/messages", json=body, headers={"X-Session-ID": "bogus"}) as r:
            assert r.status == 404 and (await r.json())["type"] == "error"
        async with http.post(url + "/v1/messages", json=body) as r:  # no header: a one-request session
            assert r.status == 200
            temp_sid = r.headers["X-Session-ID"]
        async with http.post(url + "/v1/messages", json={**body, "stream": True}) as r:
            assert r.status == 200 and r.headers["X-Session-ID"] != temp_sid
            assert (await r.text()).rstrip().endswith('data: {"type": "message_stop"}')
        async with http.delete(f"{url}/sessions/{sid}") as r:
            closed = await r.json()
        assert closed["branches"] == 1 and closed["policy_tokens"] == 4
        async with http.delete(f"{url}/sessions/{sid}") as r:
            assert r.status == 404
        async with http.get(url + "/health") as r:
            assert (await r.json())["sessions"] == 0
    stop.set()
    await asyncio.wait_for(task, 60)
    record = json.loads((tmp_path / sid / "proxy_trajectory.json").read_text())
    assert record["counters"]["extensions"] == 1 and len(record["branches"][0]["token_ids"]) > 0
    assert (tmp_path / temp_sid / "proxy_trajectory.json").is_file()


def test_serve_ctrl_c(tiny_llama_dir, tmp_path):
    cmd = [sys.executable, "-m", "legorl.cli", "serve", "--model", str(tiny_llama_dir), "--kv-budget-tokens", "2048",
           "--trajectories", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        first = proc.stdout.readline()
        assert "legorl serve: model" in first and "http://127.0.0.1:" in first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "stopped" in out and "Traceback" not in err
