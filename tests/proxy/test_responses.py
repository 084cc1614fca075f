"""The Responses API (`/v1/responses`) with the official `openai` client, unmodified, against a real server on
127.0.0.1: plain, streamed, tools round trip, previous_response_id, hostile inputs, and token fidelity."""

from __future__ import annotations

import json

import aiohttp
import openai
import pytest

from legorl.proxy import ProxyConfig, ProxyServer

from .helpers import ScriptedManager, teacher_forced

TOOLS = [{"type": "function", "name": "bash", "description": "run",
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]
CALL = 'Checking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'


def oa(session) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=session.openai_base_url, api_key="unused", max_retries=0)


async def scripted(manager, tokenizer, script, **kw) -> ProxyServer:
    server = ProxyServer(ScriptedManager(manager, tokenizer, script, eos_id=2), tokenizer, ProxyConfig(**kw))
    await server.start()
    return server


async def test_plain_streamed_and_incomplete(proxy):
    s = proxy.open_session()
    c = oa(s)
    kw = {"model": "policy", "instructions": "be terse", "input": "hello", "max_output_tokens": 7,
          "extra_body": {"seed": 3}}
    r = await c.responses.create(**kw)
    assert r.object == "response" and r.status in ("completed", "incomplete") and r.instructions == "be terse"
    assert [o.type for o in r.output] == ["message"] and isinstance(r.output_text, str)
    assert r.usage.output_tokens > 0 and r.usage.input_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    rec = await proxy.close_session(s.id)
    assert sum(rec.mask) == r.usage.output_tokens and rec.counters.calls == 1

    s2 = proxy.open_session()
    kinds, text, final = [], [], None
    async for e in await oa(s2).responses.create(**kw, stream=True):
        kinds.append(e.type)
        if e.type == "response.output_text.delta":
            text.append(e.delta)
        if e.type in ("response.completed", "response.incomplete"):
            final = e.response
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{r.status}"]
    assert "".join(text) == r.output_text == final.output_text and final.usage.output_tokens == r.usage.output_tokens

    cut = await oa(proxy.open_session()).responses.create(model="p", input="hi", max_output_tokens=1, extra_body={"ignore_eos": True})
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.output[0].status == "incomplete"


async def test_tools_round_trip_and_streamed_call(manager, tokenizer):
    server = await scripted(manager, tokenizer, [CALL, "Done.", CALL, CALL])
    try:
        s = server.open_session()
        c = oa(s)
        items: list = [{"role": "user", "content": "list files"}]
        r = await c.responses.create(model="p", input=items, tools=TOOLS, tool_choice="auto", store=False)
        assert [o.type for o in r.output] == ["message", "function_call"] and r.output_text == "Checking."
        call = r.output[1]
        assert call.name == "bash" and json.loads(call.arguments) == {"cmd": "ls -la"} and call.call_id
        items += [o.model_dump(exclude_none=True) for o in r.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
        r2 = await c.responses.create(model="p", input=items, tools=TOOLS, store=False)
        assert r2.output_text == "Done." and r2.status == "completed"
        rec = await server.close_session(s.id)
        assert rec.counters.extensions == 1 and rec.counters.rewrites == 0 and rec.counters.tool_calls == 1
        assert rec.counters.boundary_mismatches == 0
        kinds, args, done = [], [], None
        async for e in await oa(server.open_session()).responses.create(model="p", input=items[:1], tools=TOOLS,
                                                                         stream=True):
            kinds.append(e.type)
            if e.type == "response.function_call_arguments.delta":
                args.append(e.delta)
            if e.type == "response.function_call_arguments.done":
                done = e.arguments
        assert "".join(args) == done == call.arguments
        assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 2
        # the SDK's own accumulator (responses.stream) checks the event sequence item by item
        async with oa(server.open_session()).responses.stream(model="p", input=items[:1], tools=TOOLS) as stream:
            final = await stream.get_final_response()
        assert final.output_text == "Checking." and final.output[1].arguments == call.arguments
    finally:
        await server.close()


async def test_previous_response_id_continues_the_conversation(manager, tokenizer):
    server = await scripted(manager, tokenizer, [CALL, "Done.", "Again.", "x"], max_stored_responses=2)
    try:
        s = server.open_session()
        c = oa(s)
        r1 = await c.responses.create(model="p", instructions="sys", input="list files", tools=TOOLS)
        call = r1.output[1]
        out = {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"}
        r2 = await c.responses.create(model="p", instructions="sys", input=[out], tools=TOOLS,
                                      previous_response_id=r1.id)
        assert r2.output_text == "Done." and r2.previous_response_id == r1.id
        r3 = await c.responses.create(model="p", instructions="sys", input="more", previous_response_id=r2.id,
                                      tools=TOOLS, store=False)
        assert r3.output_text == "Again."
        with pytest.raises(openai.BadRequestError, match="not found"):  # store=false: nothing to continue
            await c.responses.create(model="p", input="x", previous_response_id=r3.id)
        with pytest.raises(openai.BadRequestError, match="not found"):
            await c.responses.create(model="p", input="x", previous_response_id="resp_nope")
        rec = await server.close_session(s.id)
        assert len(rec.branches) == 1 and rec.counters.extensions == 2 and rec.counters.rewrites == 0
    finally:
        await server.close()


async def test_serve_routes_keep_responses_across_one_request_sessions(manager, tokenizer):
    server = await scripted(manager, tokenizer, ["One.", "Two."], bare_routes=True, management_routes=True)
    try:
        c = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        r1 = await c.responses.create(model="p", input="hi")
        r2 = await c.responses.create(model="p", input="and?", previous_response_id=r1.id)
        assert (r1.output_text, r2.output_text) == ("One.", "Two.") and not server.sessions
        assert len(server.bare_responses) == 2
    finally:
        await server.close()


async def test_hostile_inputs_get_a_4xx_and_the_server_lives(proxy):
    s = proxy.open_session()
    url = f"{s.openai_base_url}/responses"
    deep = "[" * 100_000 + "]" * 100_000
    cases = [  # (body, extra headers, status, words in the message)
        ({"input": []}, {}, 400, "must not be empty"),
        ({"input": 5}, {}, 400, "input"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, {}, 400, "text only"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, {}, 400, "not supported"),
        ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}, {}, 400, "does not answer"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": deep}]}, {}, 400,
         "nested too deeply"),
        ({"input": "hi", "max_output_tokens": 0}, {}, 400, "max_output_tokens"),
        ({"input": "hi", "temperature": -1}, {}, 400, "temperature"),
        ({"input": "hi", "background": True}, {}, 400, "background"),
        ({"input": "hi", "tools": [{"type": "function", "name": ""}]}, {}, 400, "name"),
        ({"input": "hi"}, {"X-Legorl-Max-Output-Tokens": "lots"}, 400, "not a number"),
        ({"input": "hi"}, {"X-Legorl-Temperature": "nan"}, 400, "out of range"),
        ({"input": "x" * 40_000, "max_output_tokens": 4}, {}, 400, "too long"),
    ]
    async with aiohttp.ClientSession() as http:
        for body, headers, status, words in cases:
            async with http.post(url, data=json.dumps(body), headers={"Content-Type": "application/json",
                                                                       **headers}) as resp:
                err = await resp.json()
                assert resp.status == status and words in err["error"]["message"], (body, resp.status, err)
        async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400
        # unknown tool kinds (Codex sends web_search, namespaces) are accepted and left out of the prompt
        body = {"input": "hi", "max_output_tokens": 2, "tools": [{"type": "web_search"}, *TOOLS]}
        async with http.post(url, json=body, headers={"X-Legorl-Temperature": "0"}) as resp:
            assert resp.status == 200 and (await resp.json())["status"] in ("completed", "incomplete")
        async with http.get(f"{proxy.url}/health") as resp:
            assert resp.status == 200
    rec = await proxy.close_session(s.id)
    assert rec.counters.calls >= 1 and sum(rec.mask) >= 1


async def test_header_default_caps_output_tokens(proxy):
    s = proxy.open_session()
    c = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0,
                           default_headers={"X-Legorl-Max-Output-Tokens": "3"})
    r = await c.responses.create(model="p", input="hello", extra_body={"ignore_eos": True})
    assert r.usage.output_tokens == 3 and r.status == "incomplete"


async def test_fidelity_through_responses(proxy, hf_model):
    """Rollout logprobs of a 3-turn Responses conversation vs a teacher-forced recompute (fp32)."""
    s = proxy.open_session()
    c = oa(s)
    prev = None
    for turn in range(3):
        r = await c.responses.create(model="p", instructions="You count.", input=f"count {turn}", max_output_tokens=6,
                                     temperature=1.0, previous_response_id=prev, extra_body={"seed": turn})
        prev = r.id
    rec = await proxy.close_session(s.id)
    assert len(rec.branches) == 1 and rec.counters.extensions == 2 and rec.counters.boundary_mismatches == 0
    ref = teacher_forced(hf_model, rec.main.token_ids)
    deltas = [abs(lp - ref[i]) for i, (m, lp) in enumerate(zip(rec.main.mask, rec.main.logprobs, strict=True)) if m]
    assert len(deltas) == sum(rec.mask) >= 3
    assert sum(deltas) / len(deltas) <= 1e-5 and max(deltas) < 1e-4


def test_items_map_onto_the_chat_conversation():
    """Reasoning text passes through into the next assistant message; function calls join the assistant
    message they follow; developer is system; instructions lead and are not part of what an id keeps."""
    from legorl.proxy.schemas_responses import ResponsesRequest, to_chat_request

    req = ResponsesRequest.model_validate({"instructions": "be brief", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
    ]})
    chat, kept = to_chat_request(req, [], max_tokens=9, temperature=0.5)
    roles = [(m.role, m.content) for m in chat.messages]
    assert roles == [("system", "be brief"), ("system", "rules"), ("user", "go"), ("assistant", "think\nok"),
                     ("tool", "a"), ("tool", "b")]
    calls = chat.messages[3].tool_calls
    assert [(c.id, c.arguments) for c in calls] == [("c1", {"cmd": "ls"}), ("c2", "not json")]
    assert kept == chat.messages[1:] and (chat.max_tokens, chat.temperature) == (9, 0.5)
