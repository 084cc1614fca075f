"""Token streaming through the proxy with the official `openai` / `anthropic` clients, the real
tiny-llama engine (tests/conftest.py) and real HTTP on 127.0.0.1.

Streaming is judged by the engine's own counter (`stats().generated_tokens`), not by wall-clock
thresholds: when the first text delta reaches the client, the engine must still be far from done.
Tool-call hold-back uses `ScriptedManager` (tests/proxy/helpers.py), which feeds its scripted tokens
to the stream one at a time, because a random tiny model cannot write a tool call."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Callable

import anthropic
import openai
import pytest

from legorl.proxy.parsers import get_parser
from legorl.proxy.streaming import TextStream
from legorl.serving.types import GenerateRequest, SamplingParams

from .test_clients import CALL, TOOLS_OA, an, oa, scripted_server

APIS = ["chat", "responses", "messages"]
MSGS = [{"role": "user", "content": "count to a thousand"}]


async def stream_text(api: str, session, max_tokens: int, on_first: Callable[[], None] | None = None,
                      stop_after_first: bool = False, **extra) -> str:
    """Stream one call with the official client; return the concatenated text deltas. `on_first` runs
    when the first non-empty text delta arrives; `stop_after_first` then closes the stream."""
    body = {"ignore_eos": True, "seed": 11, **extra}
    parts: list[str] = []

    def got(text: str | None) -> bool:
        if text:
            if not parts and on_first is not None:
                on_first()
            parts.append(text)
        return bool(parts) and stop_after_first

    if api == "chat":
        stream = await oa(session).chat.completions.create(model="p", messages=MSGS, max_tokens=max_tokens,
                                                           temperature=1.0, stream=True, extra_body=body)
        async for chunk in stream:
            if chunk.choices and got(chunk.choices[0].delta.content):
                break
        await stream.close()
    elif api == "responses":
        stream = await oa(session).responses.create(model="p", input=MSGS[0]["content"], max_output_tokens=max_tokens,
                                                    temperature=1.0, stream=True, extra_body=body)
        async for ev in stream:
            if ev.type == "response.output_text.delta" and got(ev.delta):
                break
        await stream.close()
    else:
        async with an(session).messages.stream(model="p", messages=MSGS, max_tokens=max_tokens,
                                               extra_body=body) as s:  # temperature: the proxy's default 1.0
            async for text in s.text_stream:
                if got(text):
                    break
    return "".join(parts)


async def buffered_text(api: str, session, max_tokens: int) -> str:
    body = {"ignore_eos": True, "seed": 11}
    if api == "chat":
        r = await oa(session).chat.completions.create(model="p", messages=MSGS, max_tokens=max_tokens,
                                                      temperature=1.0, extra_body=body)
        return r.choices[0].message.content
    if api == "responses":
        r = await oa(session).responses.create(model="p", input=MSGS[0]["content"], max_output_tokens=max_tokens,
                                               temperature=1.0, extra_body=body)
        return r.output_text
    r = await an(session).messages.create(model="p", messages=MSGS, max_tokens=max_tokens, extra_body=body)
    return "".join(b.text for b in r.content if b.type == "text")


@pytest.mark.parametrize("api", APIS)
async def test_first_delta_arrives_while_engine_is_early(api, proxy, engine):
    """The first text delta reaches the client before the engine has sampled half the tokens (a
    buffered stream would deliver it after all 256)."""
    n = 256
    g0 = engine.stats().generated_tokens
    seen: list[int] = []
    text = await stream_text(api, proxy.open_session(), n, on_first=lambda: seen.append(
        engine.stats().generated_tokens - g0))
    assert text and seen, "no text delta arrived"
    print(f"{api}: first delta after {seen[0]} of {n} tokens")
    assert seen[0] < n // 2, f"first delta after {seen[0]} of {n} tokens"
    assert engine.stats().generated_tokens - g0 == n


async def _idle(engine, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        st = engine.stats()
        if st.running == 0 and st.waiting == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the engine is still running the request")


@pytest.mark.parametrize("api", APIS)
async def test_disconnect_mid_stream_aborts_generation(api, proxy, engine):
    """A client that closes the stream after its first delta stops the generation in the engine, and
    the session commits nothing for that call (recorded as an aborted call)."""
    n = 1500
    g0 = engine.stats().generated_tokens
    s = proxy.open_session()
    await stream_text(api, s, n, stop_after_first=True)
    await _idle(engine)
    generated = engine.stats().generated_tokens - g0
    assert 0 < generated < n, generated
    for _ in range(100):  # the proxy notices the closed connection within its poll interval
        if not s.inflight:
            break
        await asyncio.sleep(0.05)
    rec = await proxy.close_session(s.id)
    assert rec.counters.aborted == 1 and rec.branches == [] and rec.token_ids == []


@pytest.mark.parametrize("api", APIS)
async def test_streamed_record_equals_buffered(api, proxy):
    """Same seeded request, streamed and not: identical recorded tokens, masks, logprobs, and the
    deltas add up to the buffered reply text (random tokens: multi-byte characters split across tokens)."""
    n = 48
    a, b = proxy.open_session(), proxy.open_session()
    want = await buffered_text(api, a, n)
    got = await stream_text(api, b, n)
    ra, rb = await proxy.close_session(a.id), await proxy.close_session(b.id)
    assert got == want
    assert ra.token_ids == rb.token_ids and ra.mask == rb.mask and ra.logprobs == rb.logprobs
    assert sum(rb.mask) == n


def test_text_stream_multibyte_stop_strings_and_tool_openers(tokenizer):
    """Token by token over real tokenizer ids: no partial character, no piece of a stop string or of a
    tool call is ever emitted, and `rest` completes the reply."""
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    text = "héllo 你好 🙂 wörld END tail"
    ids = tokenizer.encode(text, add_special_tokens=False)
    ts, out = TextStream(decode, markers=["END"]), []
    for t in ids:
        ts([t])
        piece = ts.take()
        assert "\ufffd" not in piece
        out.append(piece)
    assert "".join(out) == "héllo 你好 🙂 wörld " and ts.frozen
    assert ts.rest("héllo 你好 🙂 wörld ") == ""

    reply = f"Checking.\n{CALL.split(chr(10), 1)[1]}"
    ts, out = TextStream(decode, markers=get_parser("hermes").stream_markers, hold_space=True), []
    for t in tokenizer.encode(reply, add_special_tokens=False):
        ts([t])
        out.append(ts.take())
    assert "".join(out) == "Checking." and "<" not in "".join(out)


async def test_tool_call_text_is_held_back(manager, tokenizer):
    """A reply with text then a hermes tool call streams the text, never the call's markup; the call's
    arguments arrive as deltas (tests/proxy/test_tool_streaming.py) that add up to the call (openai client)."""
    server = await scripted_server(manager, tokenizer, [CALL])
    try:
        stream = await oa(server.open_session()).chat.completions.create(
            model="p", messages=MSGS, tools=TOOLS_OA, stream=True)
        content, args, finish = [], [], None
        async for chunk in stream:
            d = chunk.choices[0].delta
            content.append(d.content or "")
            args += [tc.function.arguments or "" for tc in d.tool_calls or [] if tc.function]
            finish = chunk.choices[0].finish_reason or finish
        assert "".join(content) == "Checking." and finish == "tool_calls"
        assert json.loads("".join(args)) == {"cmd": "ls -la"}
    finally:
        await server.close()


async def test_error_before_first_token_is_an_http_error(proxy):
    """A call refused before generation (context overflow) is a plain HTTP 400, streamed or not."""
    s = proxy.open_session()
    with pytest.raises(openai.BadRequestError):
        await oa(s).chat.completions.create(model="p", messages=MSGS, max_tokens=10**6, stream=True)
    with pytest.raises(anthropic.BadRequestError):
        async with an(s).messages.stream(model="p", messages=MSGS, max_tokens=10**6) as st:
            await st.get_final_message()


def test_a_pickled_request_drops_its_sink():
    """Process and Ray replicas get the request without the sink (a closure on this loop): they stream
    at the end, from the final output."""
    req = GenerateRequest([1, 2, 3], SamplingParams(max_tokens=4, seed=1), on_tokens=lambda ids: None)
    back = pickle.loads(pickle.dumps(req))
    assert back.on_tokens is None and back == req and req.on_tokens is not None


@pytest.mark.parametrize("api", APIS)
async def test_session_closed_mid_stream_ends_with_an_error_event(api, proxy):
    """Headers are out when the session is closed under the call: the stream ends with the protocol's
    error event, which the official clients raise (chat, messages) or report (`response.failed`)."""
    s = proxy.open_session()
    closing: list[asyncio.Task] = []

    def close() -> None:
        closing.append(asyncio.create_task(proxy.close_session(s.id)))

    if api == "responses":
        stream = await oa(s).responses.create(model="p", input="go", max_output_tokens=1500, stream=True,
                                              extra_body={"ignore_eos": True})
        kinds = []
        async for ev in stream:
            kinds.append(ev.type)
            if ev.type == "response.output_text.delta" and not closing:
                close()
        assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    else:
        with pytest.raises((openai.APIError, anthropic.APIStatusError), match="generation was aborted") as err:
            await stream_text(api, s, 1500, on_first=close)
        assert not isinstance(err.value, openai.APIConnectionError | anthropic.APIConnectionError)
    await asyncio.gather(*closing)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_stop_string_ends_the_generation(streamed, proxy, engine):
    """A stop string ends the engine's generation when it is sampled (proxy/stopwatch.py), not at
    `max_tokens`: the reply is cut there exactly as before (same text, streamed or not; the recorded
    tokens a prefix of the unstopped call's) and the engine sampled far fewer than the 256 asked."""
    n = 256
    a = proxy.open_session()
    full = await buffered_text("chat", a, n)
    stop = full[10:13]
    want = full[:full.find(stop)]
    b = proxy.open_session()
    g0 = engine.stats().generated_tokens
    if streamed:
        got = await stream_text("chat", b, n, stop=[stop])
    else:
        r = await oa(b).chat.completions.create(model="p", messages=MSGS, max_tokens=n, temperature=1.0, stop=[stop],
                                                extra_body={"ignore_eos": True, "seed": 11})
        got = r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop"
    await _idle(engine)
    generated = engine.stats().generated_tokens - g0
    ra, rb = await proxy.close_session(a.id), await proxy.close_session(b.id)
    assert got == want
    assert rb.token_ids == ra.token_ids[:len(rb.token_ids)] and len(rb.token_ids) < len(ra.token_ids)
    assert generated < n // 4, f"the engine sampled {generated} of {n} tokens after the stop string"
