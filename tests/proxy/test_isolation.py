"""One request never fails another: hostile sampling values in session B while session A generates."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

OA, AN = "/v1/chat/completions", "/v1/messages"
HOSTILE = [
    {"top_p": 1e-300}, {"temperature": 1e20}, {"temperature": 1e308, "top_p": 1e-300}, {"top_p": 5e-324},
    {"temperature": 1e-300, "top_p": 1e-300}, {"temperature": 3.0e38, "top_k": 1}, {"top_k": 2**62},
]


async def post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as r:
        return r.status, await r.json(content_type=None)


@pytest.mark.parametrize("path", [OA, AN])
async def test_hostile_sampling_never_fails_another_session(proxy, path):
    a, b = proxy.open_session(), proxy.open_session()
    long = {"messages": [{"role": "user", "content": "tell me a long story"}], "max_tokens": 96, "ignore_eos": True}
    task = asyncio.create_task(post(a.base_url + path, long))
    results = []
    for extra in HOSTILE:
        results.append(await post(b.base_url + path, {"messages": [{"role": "user", "content": "x"}],
                                                        "max_tokens": 3, **extra}))
        await asyncio.sleep(0.05)
    status, body = await task
    assert status == 200, body
    usage = body["usage"]
    assert usage.get("completion_tokens", usage.get("output_tokens")) == 96
    for (st, out), extra in zip(results, HOSTILE, strict=True):
        assert st in (200, 400), (extra, out)  # served robustly, or refused with a message
    assert all(st == 200 for st, _ in results[:2])  # in-range values are served, not refused
