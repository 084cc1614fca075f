"""The official `openai` and `anthropic` clients, unmodified, against session URLs."""

from __future__ import annotations

import json

import anthropic
import openai

from legorl.proxy import ProxyServer

from .helpers import ScriptedManager

TOOLS_OA = [{"type": "function", "function": {"name": "bash", "description": "run",
                                              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
TOOLS_AN = [{"name": "bash", "description": "run",
             "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
CALL = 'Checking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'


async def scripted_server(manager, tokenizer, script) -> ProxyServer:
    server = ProxyServer(ScriptedManager(manager, tokenizer, script, eos_id=2), tokenizer)
    await server.start()
    return server


def oa(session) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=session.openai_base_url, api_key="unused", max_retries=0)


def an(session) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=session.anthropic_base_url, api_key="unused", max_retries=0)


async def test_openai_plain_and_stream(proxy):
    s = proxy.open_session()
    c = oa(s)
    msgs = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hello"}]
    r = await c.chat.completions.create(model="policy", messages=msgs, max_tokens=7, seed=3, logprobs=True)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length") and isinstance(ch.message.content, str)
    assert r.usage.completion_tokens == len(ch.logprobs.content) and r.usage.prompt_tokens > 0
    s2 = proxy.open_session()
    stream = await oa(s2).chat.completions.create(model="policy", messages=msgs, max_tokens=7, seed=3, stream=True,
                                                  stream_options={"include_usage": True})
    parts, finish, usage = [], None, None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(parts) == ch.message.content and finish == ch.finish_reason
    assert usage.completion_tokens == r.usage.completion_tokens
    models = await c.models.list()
    assert [m.id for m in models.data] == [proxy.config.model_name]
    rec = await proxy.close_session(s.id)
    assert sum(rec.mask) == r.usage.completion_tokens


async def test_openai_tool_calls_and_stream(manager, tokenizer):
    server = await scripted_server(manager, tokenizer, [CALL, "Done.", CALL])
    try:
        s = server.open_session()
        c = oa(s)
        msgs = [{"role": "user", "content": "list files"}]
        r = await c.chat.completions.create(model="p", messages=msgs, tools=TOOLS_OA, tool_choice="auto")
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content == "Checking."
        (call,) = ch.message.tool_calls
        assert call.function.name == "bash" and json.loads(call.function.arguments) == {"cmd": "ls -la"}
        msgs += [ch.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "x"}]
        r2 = await c.chat.completions.create(model="p", messages=msgs, tools=TOOLS_OA)
        assert r2.choices[0].message.content == "Done." and r2.choices[0].finish_reason == "stop"
        stream = await oa(server.open_session()).chat.completions.create(
            model="p", messages=msgs[:1], tools=TOOLS_OA, stream=True)
        calls: dict[int, dict] = {}
        finish = None
        async for chunk in stream:
            for tc in chunk.choices[0].delta.tool_calls or []:
                d = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                d["id"] += tc.id or ""
                d["name"] += (tc.function.name or "") if tc.function else ""
                d["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls" and calls[0]["name"] == "bash"
        assert json.loads(calls[0]["arguments"]) == {"cmd": "ls -la"} and calls[0]["id"].startswith("call_")
        rec = await server.close_session(s.id)
        assert rec.counters.extensions == 1 and rec.counters.tool_calls == 1
    finally:
        await server.close()


async def test_anthropic_plain_stream_count(proxy):
    s = proxy.open_session()
    c = an(s)
    kw = dict(model="policy", max_tokens=6, system="be terse", messages=[{"role": "user", "content": "hi"}])
    m = await c.messages.create(**kw, extra_body={"temperature": 0.0})
    assert m.role == "assistant" and m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.output_tokens >= 1 and m.usage.input_tokens > 0
    text = "".join(b.text for b in m.content if b.type == "text")
    events = []
    async with an(proxy.open_session()).messages.stream(**kw, extra_body={"temperature": 0.0}) as stream:
        async for ev in stream:
            events.append(ev.type)
        final = await stream.get_final_message()
    assert "".join(b.text for b in final.content if b.type == "text") == text
    assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens
    assert events[0] == "message_start" and events[-1] == "message_stop"
    n = await c.messages.count_tokens(model="policy", system="be terse", messages=[{"role": "user", "content": "hi"}])
    assert n.input_tokens == m.usage.input_tokens


async def test_anthropic_tools_round_trip_and_stream(manager, tokenizer):
    server = await scripted_server(manager, tokenizer, [CALL, "All good.", CALL])
    try:
        s = server.open_session()
        c = an(s)
        msgs: list[dict] = [{"role": "user", "content": "list files"}]
        m = await c.messages.create(model="p", max_tokens=64, messages=msgs, tools=TOOLS_AN)
        assert m.stop_reason == "tool_use"
        text, use = m.content
        assert text.text == "Checking." and use.name == "bash" and use.input == {"cmd": "ls -la"}
        assert use.id.startswith("toolu_")
        msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "a b"}]}]
        m2 = await c.messages.create(model="p", max_tokens=64, messages=msgs, tools=TOOLS_AN)
        assert m2.content[0].text == "All good." and m2.stop_reason == "end_turn"
        async with an(server.open_session()).messages.stream(
            model="p", max_tokens=64, messages=msgs[:1], tools=TOOLS_AN) as stream:
            final = await stream.get_final_message()
        assert final.stop_reason == "tool_use" and final.content[1].input == {"cmd": "ls -la"}
        rec = await server.close_session(s.id)
        assert rec.counters.extensions == 1 and "<tool_response>\na b\n</tool_response>" in tokenizer.decode(
            rec.token_ids)
        assert rec.messages[1]["tool_calls"][0]["id"] == use.id and rec.messages[2]["tool_call_id"] == use.id
    finally:
        await server.close()


async def test_a_call_cut_at_max_tokens_is_counted_as_length_capped(manager, tokenizer):
    """`counters.length_capped` (rollout/turns/length_capped_share, the doctor's length-cap signature): a reply the
    engine cut at max_tokens counts; one that ended with its end-of-turn token does not."""
    for eos, finish, capped in ((None, "length", 1), (2, "stop", 0)):
        server = ProxyServer(ScriptedManager(manager, tokenizer, ["echo a b c d e f"], eos_id=eos), tokenizer)
        await server.start()
        try:
            s = server.open_session()
            r = await oa(s).chat.completions.create(model="p", messages=[{"role": "user", "content": "go"}])
            assert r.choices[0].finish_reason == finish
            rec = await server.close_session(s.id)
            assert (rec.counters.calls, rec.counters.length_capped) == (1, capped)
        finally:
            await server.close()
