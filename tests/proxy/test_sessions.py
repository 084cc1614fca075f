"""Session lifecycle and branch bookkeeping: parallel calls, close mid-call, retries, template drift."""

from __future__ import annotations

import asyncio
import copy

import aiohttp
import openai
import pytest

from legorl.proxy import ProxyServer

from .helpers import ScriptedManager


def client(session) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=session.openai_base_url, api_key="unused", max_retries=0)


async def test_session_ids_and_models_route(proxy):
    a, b = proxy.open_session(), proxy.open_session()
    assert a.id != b.id and len(a.id) >= 32 and a.openai_base_url == a.anthropic_base_url + "/v1"
    async with aiohttp.ClientSession() as http:
        async with http.get(a.openai_base_url + "/models") as r:
            assert r.status == 200
        async with http.get(proxy.url + "/sess/nope/v1/models") as r:
            assert r.status == 404
        async with http.get(proxy.url + "/health") as r:
            assert (await r.json())["sessions"] == 2


async def test_parallel_branches_and_same_branch_calls(proxy):
    s = proxy.open_session()
    c = client(s)
    main = [{"role": "system", "content": "main"}, {"role": "user", "content": "task"}]
    sub = [{"role": "system", "content": "sub-agent"}, {"role": "user", "content": "look around"}]
    await asyncio.gather(
        c.chat.completions.create(model="p", messages=main, max_tokens=3, seed=1),
        c.chat.completions.create(model="p", messages=sub, max_tokens=3, seed=2),
        c.chat.completions.create(model="p", messages=main, max_tokens=3, seed=3),  # same history, in parallel
    )
    rec = await proxy.close_session(s.id)
    assert sorted(b.kind for b in rec.branches) == ["main", "sub"]
    # the two calls on one history were serialized: the second one is a retry of the first
    assert rec.counters.retries == 1 and rec.counters.rewrites == 1
    assert all(sum(b.mask) == 3 for b in rec.branches)
    assert sum(sum(seg.mask) for b in rec.branches for seg in b.superseded) == 3


async def test_close_session_mid_call(proxy):
    s = proxy.open_session()
    body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 1500, "ignore_eos": True}

    async def call():
        async with aiohttp.ClientSession() as http, http.post(s.openai_base_url + "/chat/completions", json=body) as r:
            return r.status

    task = asyncio.create_task(call())
    for _ in range(3000):
        if proxy.sessions[s.id].inflight:
            break
        await asyncio.sleep(0.01)
    rec = await proxy.close_session(s.id)
    assert await asyncio.wait_for(task, 30) == 404
    assert rec.branches == [] and rec.counters.calls == 1


async def test_template_drift_keeps_sampled_reply(manager, tokenizer):
    """A template that drops past reasoning once another turn follows (Qwen3-style) is still an extension."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and not loop.last and '</think>' in m.content %}"
        "{{ m.content.split('</think>')[-1].lstrip() }}{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    server = ProxyServer(ScriptedManager(manager, tok, ["<think>hmm</think>answer one", "two"], eos_id=2), tok)
    await server.start()
    s = server.open_session()
    msgs = [{"role": "user", "content": "q1"}]
    r = await client(s).chat.completions.create(model="p", messages=msgs)
    msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "q2"}]
    await client(s).chat.completions.create(model="p", messages=msgs)
    rec = await server.close_session(s.id)
    await server.close()
    c = rec.counters
    assert (c.extensions, c.template_drift, c.rewrites) == (1, 1, 0)
    assert tok.decode(rec.token_ids) == (
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>hmm</think>answer one<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\ntwo<|im_end|>"
    )


@pytest.mark.parametrize("recompute", [True, False])
async def test_recompute_switch(manager, tokenizer, recompute):
    from .conftest import make_proxy

    server = make_proxy(manager, tokenizer, recompute_on_rewrite=recompute)
    await server.start()
    s = server.open_session()
    msgs = [{"role": "user", "content": "a"}]
    r = await client(s).chat.completions.create(model="p", messages=msgs, max_tokens=2, seed=0)
    msgs += [{"role": "assistant", "content": r.choices[0].message.content + " (edited)"},
             {"role": "user", "content": "b"}]
    await client(s).chat.completions.create(model="p", messages=msgs, max_tokens=2, seed=0)
    rec = await server.close_session(s.id)
    await server.close()
    assert rec.counters.rewrites == 1 and rec.counters.retries == 0
    assert (rec.counters.recomputed_tokens > 0) == recompute
    assert all(lp is not None for lp, m in zip(rec.logprobs, rec.mask, strict=True) if m)


async def test_native_template_and_qwen3_coder_parser(manager, tokenizer):
    """A template that renders tools itself gets them natively; the qwen3_coder parser is chosen per run."""
    from .test_render import NATIVE

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = NATIVE
    call = "<tool_call>\n<function=bash>\n<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>"
    from legorl.proxy import ProxyConfig

    server = ProxyServer(ScriptedManager(manager, tok, [call, "done"], eos_id=2), tok,
                         ProxyConfig(tool_parser="qwen3_coder"))
    await server.start()
    s = server.open_session()
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"cmd": {"type": "string"}}}}}]
    msgs = [{"role": "user", "content": "files?"}]
    r = await client(s).chat.completions.create(model="p", messages=msgs, tools=tools)
    (tc,) = r.choices[0].message.tool_calls
    assert tc.function.name == "bash" and tc.function.arguments == '{"cmd": "ls"}'
    msgs += [r.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tc.id, "content": "a"}]
    await client(s).chat.completions.create(model="p", messages=msgs, tools=tools)
    rec = await server.close_session(s.id)
    await server.close()
    text = tok.decode(rec.token_ids)
    assert rec.counters.extensions == 1 and rec.counters.template_drift == 0
    assert text.startswith("<tools>[{") and "<|im_start|>tool\na<|im_end|>" in text and call in text


async def test_template_without_special_tokens(manager, tokenizer):
    """Boundaries not next to a special token: the branch still decodes to the one-shot render, and a
    separate tokenization that differs from the one-shot one is counted."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    for mgr, mismatches in [(manager, None), (ScriptedManager(manager, tok, ["ok\n", "fine"], eos_id=None), 1)]:
        server = ProxyServer(mgr, tok)
        await server.start()
        s = server.open_session()
        msgs = [{"role": "user", "content": "hi"}]
        for turn in range(2):
            r = await client(s).chat.completions.create(model="p", messages=msgs, max_tokens=3, seed=turn,
                                                        extra_body={"ignore_eos": True})
            msgs += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "more"}]
        rec = await server.close_session(s.id)
        await server.close()
        text = tok.apply_chat_template(msgs[:-1], tokenize=False)
        assert rec.counters.extensions == 1 and text == tok.decode(rec.token_ids) + "\n"
        if mismatches is not None:  # "ok\n" sampled + the template's "\n": one-shot would merge "\n\n"
            assert rec.counters.boundary_mismatches == mismatches
