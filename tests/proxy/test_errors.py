"""Bad input: a 4xx in the protocol's own error shape, and the server keeps serving."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import make_proxy

OA, AN = "/v1/chat/completions", "/v1/messages"


async def post(url: str, body: bytes | str | dict, headers: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body) if isinstance(body, dict) else body
    async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers or {}) as r:
        return r.status, await r.json(content_type=None)


def is_openai_error(body: dict) -> bool:
    return isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


def is_anthropic_error(body: dict) -> bool:
    return body.get("type") == "error" and isinstance(body["error"].get("type"), str)


BAD = [
    b"{not json",
    b"[1, 2, 3]",
    b'"just a string"',
    {"messages": "hello"},
    {"messages": []},
    {"messages": [{"role": "wizard", "content": "hi"}]},
    {"messages": [{"role": "user", "content": 42}]},
    {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
    {"messages": [{"role": "user", "content": "hi"}], "n": 2},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "nope", "content": "x"}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": "hi"}], "seed": 2**70},
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}',
]
BAD_AN = [
    b"{not json",
    {"messages": [{"role": "user", "content": "hi"}]},  # max_tokens missing
    {"max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]},
    {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
    {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "orphan"}]}]},
    {"max_tokens": "many", "messages": [{"role": "user", "content": "hi"}]},
]


async def test_bad_requests_get_protocol_errors(proxy):
    s = proxy.open_session()
    for body in BAD:
        status, err = await post(s.base_url + OA, body)
        assert status == 400 and is_openai_error(err), (body, err)
    for body in BAD_AN:
        status, err = await post(s.base_url + AN, body)
        assert status == 400 and is_anthropic_error(err), (body, err)
    assert proxy.sessions[s.id].counters.errors == len(BAD) + len(BAD_AN)
    ok = {"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2}
    assert (await post(s.base_url + OA, {**ok, "temperature": 1e-300}))[0] == 200  # greedy, not inf logits
    assert (await post(s.base_url + OA, ok))[0] == 200
    rec = await proxy.close_session(s.id)
    assert len(rec.branches) == 1 and rec.branches[0].calls == 2  # failed calls left no trace


async def test_unknown_closed_session_and_body_limit(proxy):
    ok = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    status, err = await post(f"{proxy.url}/sess/not-a-session{OA}", ok)
    assert status == 404 and is_openai_error(err)
    status, err = await post(f"{proxy.url}/sess/not-a-session{AN}", {**ok, "max_tokens": 2})
    assert status == 404 and is_anthropic_error(err) and err["error"]["type"] == "not_found_error"
    s = proxy.open_session()
    await proxy.close_session(s.id)
    assert (await post(s.base_url + OA, ok))[0] == 404
    s = proxy.open_session()
    huge = {"messages": [{"role": "user", "content": "x" * 300_000}]}  # the fixture's limit is 256 KiB
    status, err = await post(s.base_url + OA, huge)
    assert status == 413 and is_openai_error(err)
    status, err = await post(s.base_url + AN, {**huge, "max_tokens": 1})
    assert status == 413 and err["error"]["type"] == "request_too_large"
    assert (await post(s.base_url + OA, ok))[0] == 200


async def test_context_overflow_both_protocols(proxy):
    s = proxy.open_session()
    window = proxy.manager.max_model_len
    c = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        await c.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}], max_tokens=window)
    assert ei.value.code == "context_length_exceeded"
    long = " ".join(["word"] * (window + 10))
    with pytest.raises(openai.BadRequestError) as ei:
        await c.chat.completions.create(model="p", messages=[{"role": "user", "content": long}])
    assert ei.value.code == "context_length_exceeded"
    a = anthropic.AsyncAnthropic(base_url=s.anthropic_base_url, api_key="unused", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as ei:
        await a.messages.create(model="p", max_tokens=16, messages=[{"role": "user", "content": long}])
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is too long" in ei.value.body["error"]["message"]
    rec = await proxy.close_session(s.id)
    assert rec.context_overflow and rec.counters.context_overflows == 3 and rec.branches == []


json_leaf = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, width=32) | st.text(max_size=8)
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                          max_size=3), max_leaves=8)
role = st.sampled_from(["system", "user", "assistant", "tool", "developer", "wizard", 3])
content = st.text(max_size=12) | st.none() | st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_result", "tool_use", "image"]), "text": st.text(max_size=6)}), max_size=2)
message = st.fixed_dictionaries({"role": role, "content": content},
                                optional={"tool_call_id": st.text(max_size=4), "tool_calls": json_value})
body = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=3) | json_value},
    optional={"max_tokens": st.integers(-2, 2) | json_value, "temperature": json_value, "stop": json_value,
              "stream": st.booleans(), "tools": json_value, "tool_choice": json_value, "system": json_value,
              "n": st.integers(0, 2), "top_p": json_value, "seed": st.integers() | json_value,
              "top_k": st.integers(-2, 5) | json_value},
) | json_value


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([OA, AN]), body | st.binary(max_size=20))
def fuzz_once(loop_and_url, path, payload):
    loop, url = loop_and_url
    raw = payload if isinstance(payload, bytes) else json.dumps(payload)

    async def go():
        async with aiohttp.ClientSession() as http, http.post(url + path, data=raw) as r:
            return r.status, await r.read()

    status, data = loop.run_until_complete(go())
    assert status < 500, (path, raw, data)


def test_fuzz_request_bodies(manager, tokenizer):
    """No request body makes the proxy answer 5xx or stop serving."""
    loop = asyncio.new_event_loop()
    server = make_proxy(manager, tokenizer, default_max_tokens=2, max_body_bytes=64 * 1024)
    try:
        loop.run_until_complete(server.start())
        s = server.open_session()
        fuzz_once((loop, s.base_url))

        async def health():
            async with aiohttp.ClientSession() as http, http.get(server.url + "/health") as r:
                return r.status

        assert loop.run_until_complete(health()) == 200
    finally:
        loop.run_until_complete(server.close())
        loop.close()


async def test_clamp_max_tokens(engine, tokenizer):
    from legorl.serving.manager import SingleReplicaManager

    manager = SingleReplicaManager(engine, 48)  # a small window keeps the clamped generation short
    server = make_proxy(manager, tokenizer, clamp_max_tokens=True)
    await server.start()
    s = server.open_session()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}
    status, out = await post(s.base_url + AN, body)
    window = manager.max_model_len
    assert status == 200 and out["usage"]["input_tokens"] + out["usage"]["output_tokens"] <= window
    assert out["stop_reason"] in ("max_tokens", "end_turn")
    rec = await server.close_session(s.id)
    await server.close()
    assert not rec.context_overflow
