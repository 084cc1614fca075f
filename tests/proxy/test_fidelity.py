"""Token fidelity: the accumulator against one-shot renders and teacher-forced logprobs."""

from __future__ import annotations

import openai
import pytest

from legorl.models.chat import chat_ids, render_chat
from legorl.proxy import ProxyConfig, ProxyServer
from legorl.proxy.schemas_openai import ChatCompletionRequest, to_chat_request

from .helpers import ScriptedManager, teacher_forced

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a shell command",
                                            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
SCRIPT = [
    'I will look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
    '<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.txt"}}\n</tool_call>',
    "The file says hello.",
]


def one_shot(server: ProxyServer, messages: list[dict], tools=None, gen: bool = False) -> tuple[str, list[int]]:
    """Independent one-shot render of a whole conversation (OpenAI dicts) with the normalization layer."""
    chat = to_chat_request(ChatCompletionRequest(messages=messages, tools=tools))
    msgs, native_tools = server.renderer.template_messages(chat.messages, chat.tools)
    tok = server.renderer.tok
    return render_chat(tok, msgs, native_tools, gen), chat_ids(tok, msgs, native_tools, gen)


def assert_policy_logprobs(branch, hf_model, tol: float = 1e-4) -> int:
    ref = teacher_forced(hf_model, branch.token_ids)
    n = 0
    for i, (m, lp) in enumerate(zip(branch.mask, branch.logprobs, strict=True)):
        if m:
            assert lp is not None and abs(lp - ref[i]) < tol, (i, lp, ref[i])
            n += 1
    return n


async def run_tool_session(server: ProxyServer) -> tuple[list[dict], object]:
    s = server.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "What does a.txt say?"}]
    outputs = {"ls": "a.txt\nb.txt", "cat a.txt": "hello"}
    for _ in range(3):
        resp = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, temperature=1.0)
        msg = resp.choices[0].message
        messages.append(msg.model_dump(exclude_none=True, exclude={"refusal", "annotations"}))
        for call in msg.tool_calls or []:
            cmd = __import__("json").loads(call.function.arguments)["cmd"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": outputs[cmd]})
    return messages, await server.close_session(s.id)


async def test_tool_session_matches_one_shot_render(manager, tokenizer, hf_model):
    server = ProxyServer(ScriptedManager(manager, tokenizer, SCRIPT, eos_id=2), tokenizer)
    await server.start()
    try:
        messages, rec = await run_tool_session(server)
    finally:
        await server.close()
    assert messages[2]["tool_calls"][0]["function"]["name"] == "bash" and messages[-1]["content"] == SCRIPT[2]
    assert rec.counters.extensions == 2 and rec.counters.rewrites == 0 and len(rec.branches) == 1
    _, expected = one_shot(server, messages, TOOLS, gen=False)
    ids = rec.token_ids
    # the accumulator stops at the last end-of-turn token; the template's "\n" after it is not sampled
    assert ids == expected[: len(ids)] and tokenizer.decode(expected[len(ids):]) == "\n"
    assert rec.mask[-1] == 1 and ids[-1] == 2
    newline = tokenizer.encode("\n", add_special_tokens=False)
    for i, t in enumerate(ids[:-1]):  # every emitted end-of-turn token is policy; the template's "\n" is not
        if t == 2 and rec.mask[i]:
            assert ids[i + 1 : i + 2] == newline and rec.mask[i + 1] == 0
    assert sum(1 for i, t in enumerate(ids) if t == 2 and rec.mask[i]) == 3
    assert assert_policy_logprobs(rec.main, hf_model) == sum(len(tokenizer.encode(t)) + 1 for t in SCRIPT)
    assert all((lp is None) == (v == -1) for lp, v in zip(rec.logprobs, rec.weight_versions, strict=True))


async def test_real_engine_multi_turn(proxy, hf_model, tokenizer):
    s = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Count to three."}]
    for turn in range(3):
        r = await client.chat.completions.create(model="p", messages=messages, max_tokens=6, seed=turn, temperature=1.0)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"again {turn}"}]
    rec = await proxy.close_session(s.id)
    assert rec.counters.extensions == 2 and rec.counters.rewrites == 0 and rec.counters.boundary_mismatches == 0
    text, _ = one_shot(proxy, messages[:-1])
    decoded = tokenizer.decode(rec.token_ids)  # ends at the last sampled token (eos or length cut)
    assert text.startswith(decoded) and text[len(decoded) :] in ("\n", "<|im_end|>\n")
    # context runs are canonical tokenizations; sampled runs are kept exactly as sampled
    runs, cur, prev = [], [], None
    for t, m in zip(rec.token_ids, rec.mask, strict=True):
        if m != prev and cur:
            runs.append((prev, cur))
            cur = []
        cur.append(t)
        prev = m
    runs.append((prev, cur))
    assert any(m == 0 and tokenizer.encode(tokenizer.decode(r), add_special_tokens=False) == r for m, r in runs)
    assert assert_policy_logprobs(rec.main, hf_model) == 18
    assert set(rec.weight_versions[i] for i, m in enumerate(rec.mask) if m) == {0}


async def test_rewritten_history_is_recomputed(proxy, hf_model):
    s = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    for turn in range(2):
        r = await client.chat.completions.create(model="p", messages=messages, max_tokens=5, seed=turn)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"next {turn}"}]
    # the scaffold compacts: drops the first exchange's reply and injects a reminder
    rewritten = [messages[0], messages[1], {"role": "user", "content": "<reminder>be brief</reminder> next 0"},
                 *messages[4:]]
    await client.chat.completions.create(model="p", messages=rewritten, max_tokens=5, seed=9)
    rec = await proxy.close_session(s.id)
    c = rec.counters
    assert c.rewrites == 1 and c.recomputed_tokens > 0 and c.dropped_tokens > 0 and len(rec.branches) == 1
    (a, b), = rec.main.recomputed_spans
    ref = teacher_forced(hf_model, rec.token_ids)
    assert b - a == c.recomputed_tokens
    for i in range(max(a, 1), b):
        assert rec.logprobs[i] is not None and abs(rec.logprobs[i] - ref[i]) < 1e-4
        assert rec.mask[i] == 0 and rec.weight_versions[i] == 0
    assert assert_policy_logprobs(rec.main, hf_model) > 0
    # the policy tokens the rewrite cut off are kept, not lost
    assert sum(sum(seg.mask) for seg in rec.main.superseded) == 10  # both replies: the fork precedes them


async def test_sub_session_is_a_separate_branch(proxy):
    s = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    main = [{"role": "system", "content": "main agent"}, {"role": "user", "content": "task"}]
    r = await client.chat.completions.create(model="p", messages=main, max_tokens=4, seed=1)
    main += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "go on"}]
    title = [{"role": "system", "content": "Write a 5-word title."}, {"role": "user", "content": "task"}]
    await client.chat.completions.create(model="p", messages=title, max_tokens=4, seed=2)
    await client.chat.completions.create(model="p", messages=main, max_tokens=4, seed=3)
    rec = await proxy.close_session(s.id)
    assert [b.kind for b in rec.branches] == ["main", "sub"]
    assert rec.counters.extensions == 1 and rec.counters.rewrites == 0 and rec.counters.new_branches == 2
    assert rec.branches[0].calls == 2 and rec.branches[1].calls == 1
    assert "Write a 5-word title." not in proxy.renderer.decode(rec.token_ids)


async def test_stop_sequence_cuts_tokens(manager, tokenizer):
    scripted = ScriptedManager(manager, tokenizer, ["alpha beta STOP gamma delta", "ok"], eos_id=2)
    server = ProxyServer(scripted, tokenizer)
    await server.start()
    s = server.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    r = await client.chat.completions.create(model="p", messages=msgs, stop=["STOP"])
    assert r.choices[0].message.content == "alpha beta " and r.choices[0].finish_reason == "stop"
    msgs += [{"role": "assistant", "content": "alpha beta "}, {"role": "user", "content": "more"}]
    await client.chat.completions.create(model="p", messages=msgs)
    rec = await server.close_session(s.id)
    await server.close()
    assert rec.counters.extensions == 1
    text = tokenizer.decode(rec.token_ids)
    # the sampled stop string stays in the token record (the model produced it), nothing after it
    assert "alpha beta STOP<|im_end|>\n<|im_start|>user\nmore" in text and "gamma" not in text


@pytest.fixture(scope="module")
def moe_manager(tiny_moe_dir):
    import asyncio

    from legorl.serving.embedded import EmbeddedEngine
    from legorl.serving.manager import SingleReplicaManager

    eng = EmbeddedEngine.from_pretrained(tiny_moe_dir, kv_budget_tokens=4096, seed=0)
    yield SingleReplicaManager(eng, eng.max_model_len)
    asyncio.run(eng.close())


async def test_moe_routing_recorded(moe_manager, tiny_moe_dir):
    from legorl.models.chat import load_tokenizer

    server = ProxyServer(moe_manager, load_tokenizer(tiny_moe_dir), ProxyConfig())
    await server.start()
    s = server.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "route me"}]
    r = await client.chat.completions.create(model="p", messages=msgs, max_tokens=4, seed=0)
    msgs += [{"role": "assistant", "content": r.choices[0].message.content}, {"role": "user", "content": "again"}]
    await client.chat.completions.create(model="p", messages=msgs, max_tokens=4, seed=1)
    rec = await server.close_session(s.id)
    await server.close()
    routed = rec.routed_experts
    assert routed is not None and routed.shape == (len(rec.token_ids), 2, 2)
    assert (routed[:-1] >= 0).all() and (routed[-1] == -1).all()  # the last sampled token was never fed back


async def test_rewrite_forks_at_last_shared_reply(proxy, hf_model):
    s = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    for turn in range(2):
        r = await client.chat.completions.create(model="p", messages=messages, max_tokens=5, seed=turn)
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": f"next {turn}"}]
    before = proxy.sessions[s.id].branches[0]
    fork = before.checkpoints[3]  # after the first reply and its template tail
    kept = list(before.ids[:fork])
    messages[3] = {"role": "user", "content": "next 0 <system-reminder>tests exist</system-reminder>"}
    await client.chat.completions.create(model="p", messages=messages, max_tokens=5, seed=7)
    rec = await proxy.close_session(s.id)
    assert rec.counters.rewrites == 1 and rec.token_ids[:fork] == kept
    assert rec.main.recomputed_spans == [(fork, fork + rec.counters.recomputed_tokens)]
    assert [sum(seg.mask) for seg in rec.main.superseded] == [5] and rec.main.superseded[0].start == fork
    ref = teacher_forced(hf_model, rec.token_ids)
    a, b = rec.main.recomputed_spans[0]
    assert max(abs(rec.logprobs[i] - ref[i]) for i in range(a, b)) < 1e-4


async def test_builtin_multi_turn_rollout_matches_the_trainer(manager, tokenizer, tiny_llama_dir, tmp_path):
    """The builtin scaffold through the proxy on a real sandbox, four turns: two scripted bash tool calls
    (engine-scored) whose real command outputs come back as `tool` turns, each followed by a turn the
    engine samples. The trainer's own recompute (Actor.compute_logprobs, fp32) agrees with the record to
    mean |Δlogp| <= 1e-5, sampled turns included, and every token of a command's output is masked."""
    import json
    import shutil
    import uuid
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    from legorl.agents.base import ScaffoldLimits
    from legorl.config import load_config
    from legorl.tasks import load_tasks
    from legorl.train.actor import Actor
    from legorl.train.batch import collate
    from legorl.train.logprobs import fidelity
    from legorl.workers import ProxyEndpoints, TrialSpec, WorkerConfig, run_trials

    call = '<tool_call>\n{{"name": "bash", "arguments": {{"command": "{}"}}}}\n</tool_call>'
    script = [call.format("cat /app/NOTE.md"), None, call.format("ls /app"), None]
    server = ProxyServer(ScriptedManager(manager, tokenizer, script, eos_id=2), tokenizer)
    await server.start()
    task = next(t for t in load_tasks("builtin:shell-multistep") if t.id == "note-create-1")
    root = Path("/tmp") / f"legorl-fidtest-{uuid.uuid4().hex[:8]}"
    cfg = WorkerConfig(limits=ScaffoldLimits(max_turns=4, max_tokens_per_call=12, temperature=1.0),
                       output_root=tmp_path, sandbox_opts={"root_dir": root},
                       scaffold_kwargs={"tools": ["bash", "submit"], "seed": 3})
    try:
        (r,) = await run_trials([TrialSpec(task, trial_id="fid")], ProxyEndpoints(server), cfg)
    finally:
        await server.close()
        shutil.rmtree(root, ignore_errors=True)
    assert r.metadata["exit_status"] == "turn_limit" and r.turns == 4, r.reason
    c = r.metadata["counters"]
    assert c["tool_calls"] == 2 and c["tool_parse_failures"] == 0 and c["rewrites"] == 0
    ro = r.tokens
    # the trained tokens are the proxy record in the trial dir, mask included
    main = json.loads((Path(r.artifacts_dir) / "proxy_trajectory.json").read_text())["branches"][0]
    assert ro.token_ids == main["token_ids"] and ro.response_mask == main["mask"]
    runs: list[tuple[int, list[int]]] = []  # (mask, positions) of each maximal run
    for i, m in enumerate(ro.response_mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(i)
        else:
            runs.append((m, [i]))
    policy = [pos for m, pos in runs if m]
    assert len(policy) == 4 and sum(map(len, policy)) == c["completion_tokens"]  # the engine's tokens, no others
    # every command output the scaffold sent back is context: inside a mask-0 run, in no policy run
    outputs = [m["content"] for m in json.loads((Path(r.artifacts_dir) / "agent" / "messages.json").read_text())
               if m["role"] == "tool"]
    assert len(outputs) == 2 and "NOTE" in outputs[1] and "exit code: 0" in outputs[0]
    text = {m: [tokenizer.decode([ro.token_ids[i] for i in pos]) for mm, pos in runs if mm == m] for m in (0, 1)}
    for out in outputs:
        for line in (x for x in out.splitlines() if x and not any(x in s for s in script if s)):  # not in a call
            assert any(line in t for t in text[0]) and not any(line in t for t in text[1]), line
    # the trainer's recompute: all policy tokens, and the two sampled turns alone
    run_cfg = load_config(None, [])
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    actor = Actor(model, run_cfg.trainer, run_cfg.algorithm, 1.0)
    batch = collate([r])
    logp = actor.compute_logprobs(batch)
    fid = fidelity(logp, batch.behav_logp, batch.mask)
    assert fid["rollout_corr/abs_diff_mean"] <= 1e-5, fid
    sampled = [i for pos in (policy[1], policy[3]) for i in pos]
    assert len(sampled) >= 2
    gap = [abs(float(logp[0, i]) - ro.logprobs[i]) for i in sampled]
    assert sum(gap) / len(gap) <= 1e-5 and max(gap) <= 1e-4, gap
