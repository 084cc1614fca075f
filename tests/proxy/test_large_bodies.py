"""Large bodies: parsed and tokenized off the event loop, a few at a time; hopeless ones never tokenized."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from legorl.proxy.config import ProxyConfig
from legorl.proxy.intake import Intake
from legorl.serving.manager import SingleReplicaManager

from .conftest import make_proxy


def history(chars: int) -> bytes:
    turn = " ".join(f"w{(i * 7919) % 50021}" for i in range(400))
    msgs = [{"role": "system", "content": "You are a coding agent."}]
    while sum(len(m["content"]) for m in msgs) < chars:
        msgs += [{"role": "user", "content": turn}, {"role": "assistant", "content": turn[:300]}]
    msgs.append({"role": "user", "content": "next?"})
    return json.dumps({"messages": msgs, "max_tokens": 2}).encode()


@pytest.fixture
async def proxy_big(manager, tokenizer):
    server = make_proxy(manager, tokenizer, max_body_bytes=4 << 20, large_body_bytes=64 << 10)
    await server.start()
    yield server
    await server.close()


async def test_large_body_leaves_the_event_loop_free(engine, tokenizer):
    # a wide window makes the character bound loose, so this body must really be tokenized (~1-2 s)
    server = make_proxy(SingleReplicaManager(engine, 8192), tokenizer, max_body_bytes=4 << 20,
                        large_body_bytes=64 << 10)
    await server.start()
    try:
        bound = 8192 * server.renderer.max_token_chars * server.renderer.chars_margin
        body = history(int(bound * 0.8))
        s = server.open_session()
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.005)
                gaps.append(time.perf_counter() - t - 0.005)

        tick = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        async with aiohttp.ClientSession() as http, http.post(s.openai_base_url + "/chat/completions", data=body,
                                                               headers={"Content-Type": "application/json"}) as r:
            out = await r.json()
        took = time.perf_counter() - t0
        done.set()
        await tick
        assert r.status == 400 and out["error"]["code"] == "context_length_exceeded", out
        assert "tokens" in out["error"]["message"]  # it was tokenized, not cut short by the bound
        assert max(gaps) < min(0.5, took / 3), (max(gaps), took)  # inline, one gap would be ~ the whole call
    finally:
        await server.close()


async def test_hopeless_prompt_is_refused_without_tokenizing(proxy_big):
    s = proxy_big.open_session()
    window = proxy_big.manager.max_model_len
    body = history(int(window * proxy_big.renderer.max_token_chars * proxy_big.renderer.chars_margin) + 1000)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as http, http.post(s.openai_base_url + "/chat/completions", data=body,
                                                           headers={"Content-Type": "application/json"}) as r:
        out = await r.json()
    assert r.status == 400 and out["error"]["code"] == "context_length_exceeded"
    assert "characters cannot fit" in out["error"]["message"], out
    assert time.perf_counter() - t0 < 5
    rec = await proxy_big.close_session(s.id)
    assert rec.context_overflow and rec.counters.context_overflows == 1


async def test_large_bodies_take_a_bounded_number_of_slots():
    intake = Intake(ProxyConfig(large_body_bytes=1000, max_concurrent_large_bodies=2))
    small = make_mocked_request("POST", "/", headers={"Content-Length": "10"})
    big = make_mocked_request("POST", "/", headers={"Content-Length": "5000"})
    gz = make_mocked_request("POST", "/", headers={"Content-Length": "10", "Content-Encoding": "gzip"})
    async with intake.lane(small) as lane:
        assert not lane.large
    entered: list[int] = []
    release = asyncio.Event()

    async def hold(i: int, req) -> None:
        async with intake.lane(req) as lane:
            assert lane.large
            entered.append(i)
            await release.wait()

    tasks = [asyncio.create_task(hold(i, req)) for i, req in enumerate([big, gz, big])]
    await asyncio.sleep(0.05)
    assert entered == [0, 1]  # the third waits for a slot
    release.set()
    await asyncio.gather(*tasks)
    assert entered == [0, 1, 2]
