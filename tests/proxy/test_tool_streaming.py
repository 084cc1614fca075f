"""Tool-call arguments streamed as sampled (hermes calls): chat `tool_calls[].function.arguments` deltas,
Responses `response.function_call_arguments.delta`, Anthropic `input_json_delta`, read by the official
clients' own stream accumulators; the final message they assemble and the session record equal the
buffered call's. The policy is `ScriptedManager` paced one token per loop turn (a random tiny model cannot
write a tool call); "as sampled" is judged by the manager's own count of tokens fed when the first argument
delta reaches the client."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from legorl.proxy.toolstream import CallStream, JsonCanon

from .helpers import ScriptedManager
from .test_clients import TOOLS_AN, TOOLS_OA, an, oa

APIS = ["chat", "responses", "messages"]
MSGS = [{"role": "user", "content": "list the files"}]
# raw spacing and escapes the buffered response re-writes (json.dumps): the deltas must add up to that
REPLY = ('Checking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd":"ls  -la \\u00e9\\t/tmp",   "n" : 1.50,'
         ' "deep": {"a": [1, true, null, "x\\"y"]}}}\n</tool_call>')


class Paced(ScriptedManager):
    """Feeds its scripted tokens one per event-loop turn, counting them (`fed`)."""

    async def generate(self, request):
        self.fed = 0
        sink = request.on_tokens
        if sink is not None:
            def paced(ids):
                for t in ids:
                    self.pending.append(t)
            self.pending: list[int] = []
            request.on_tokens = paced
        out = await super().generate(request)
        if sink is not None:
            for t in self.pending:
                sink([t])
                self.fed += 1
                await asyncio.sleep(0.005)
        return out


@pytest.mark.parametrize("raw", [
    '{"a": 1}', '{ "a" :1 , "b":[ ] ,"c":{}}', '{"s": "\\u00e9\\n\\"q\\" \\/ \\ud83d\\ude00 tab\\t"}',
    '{"n": [1.50, -0, 2e3, 1E-2, 12345678901234567890], "t": [true, false, null]}', '[{"x": [[]]}, "y"]',
    '{"nested": {"deep": {"deeper": ["é", "😀"]}}}',
])
def test_canon_equals_json_dumps_fed_char_by_char(raw):
    canon, out = JsonCanon(), []
    for ch in raw + "  tail":
        out.append(canon.feed(ch))
    assert canon.done and not canon.broken and canon.consumed == len(raw)
    assert "".join(out) == json.dumps(json.loads(raw), ensure_ascii=False)


@pytest.mark.parametrize("raw", ['{"a" 1}', '{"a": tru}x', '{"a": [1,]}', '{"a": "\x01"}', "{'a': 1}"])
def test_canon_stops_at_text_that_is_not_json(raw):
    canon = JsonCanon()
    canon.feed(raw)
    assert canon.broken and not canon.done


def test_call_stream_picks_only_streamable_calls():
    text = ('<tool_call>\n{"name": "nope", "arguments": {"a": 1}}\n</tool_call>\n'
            '<tool_call>\n{"arguments": {"a": 1}, "name": "bash"}\n</tool_call>\n'
            '<tool_call>\n{"name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}\n</tool_call>\n'
            '<tool_call>\n{"name": "bash", "arguments": {"cmd": "pwd"}}\n</tool_call>')
    rng = random.Random(0)
    cs, events, cut = CallStream({"bash"}), [], 0
    while cut < len(text):
        cut = min(len(text), cut + rng.randint(1, 7))
        events += cs.poll(text[:cut])
    assert [e[0] for e in events][:1] == ["start"] and len(cs.calls) == 1
    call = cs.calls[0]
    assert call.name == "bash" and call.args == '{"cmd": "pwd"}' and call.complete
    assert "".join(e[2] for e in events if e[0] == "args") == call.args


async def _stream(api: str, session, mgr: Paced):
    """(final message as the client's accumulator built it: content, [(name, arguments)], ids), deltas seen
    before the end, and the tokens the manager had fed when the first argument delta arrived."""
    seen: list[int] = []
    if api == "chat":
        async with oa(session).chat.completions.stream(model="p", messages=MSGS, tools=TOOLS_OA) as s:
            async for ev in s:
                if ev.type == "tool_calls.function.arguments.delta":
                    seen.append(mgr.fed)
            m = (await s.get_final_completion()).choices[0].message
        return (m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls]), seen
    if api == "responses":
        async with oa(session).responses.stream(model="p", input=MSGS[0]["content"], tools=[
                {"type": "function", "name": "bash", "description": "run", "parameters": TOOLS_OA[0]["function"]["parameters"]}
        ]) as s:
            async for ev in s:
                if ev.type == "response.function_call_arguments.delta":
                    seen.append(mgr.fed)
            r = await s.get_final_response()
        text = "".join(c.text for o in r.output if o.type == "message" for c in o.content)
        return (text, [(o.name, o.arguments) for o in r.output if o.type == "function_call"]), seen
    async with an(session).messages.stream(model="p", messages=MSGS, tools=TOOLS_AN, max_tokens=200) as s:
        async for ev in s:
            if ev.type == "input_json":
                seen.append(mgr.fed)
        m = await s.get_final_message()
    text = "".join(b.text for b in m.content if b.type == "text")
    return (text, [(b.name, json.dumps(b.input, ensure_ascii=False)) for b in m.content if b.type == "tool_use"]), seen


async def _buffered(api: str, session):
    if api == "chat":
        m = (await oa(session).chat.completions.create(model="p", messages=MSGS, tools=TOOLS_OA)).choices[0].message
        return m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls]
    if api == "responses":
        r = await oa(session).responses.create(model="p", input=MSGS[0]["content"], tools=[
            {"type": "function", "name": "bash", "description": "run", "parameters": TOOLS_OA[0]["function"]["parameters"]}])
        text = "".join(c.text for o in r.output if o.type == "message" for c in o.content)
        return text, [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
    m = await an(session).messages.create(model="p", messages=MSGS, tools=TOOLS_AN, max_tokens=200)
    return ("".join(b.text for b in m.content if b.type == "text"),
            [(b.name, json.dumps(b.input, ensure_ascii=False)) for b in m.content if b.type == "tool_use"])


@pytest.mark.parametrize("api", APIS)
async def test_arguments_stream_as_sampled_and_add_up_to_the_buffered_reply(api, manager, tokenizer):
    from legorl.proxy import ProxyServer

    mgr = Paced(manager, tokenizer, [REPLY, REPLY], eos_id=2)
    server = ProxyServer(mgr, tokenizer)
    await server.start()
    try:
        a, b = server.open_session(), server.open_session()
        streamed, seen = await _stream(api, a, mgr)
        total = mgr.fed
        buffered = await _buffered(api, b)
        assert streamed == buffered, (streamed, buffered)
        assert streamed[1] and json.loads(streamed[1][0][1])["cmd"] == "ls  -la é\t/tmp"
        assert len(seen) > 5 and seen[0] < total - 10, (seen[:3], total)  # deltas while the call was sampled
        ra, rb = await server.close_session(a.id), await server.close_session(b.id)
        assert ra.token_ids == rb.token_ids and ra.mask == rb.mask and ra.logprobs == rb.logprobs
        assert ra.counters.tool_calls == rb.counters.tool_calls == 1
        assert (ra.counters.streamed_calls, rb.counters.streamed_calls) == (1, 0)  # time to first event: streams only
        assert ra.counters.first_event_ms >= 0 and rb.counters.first_event_ms == 0
    finally:
        await server.close()
