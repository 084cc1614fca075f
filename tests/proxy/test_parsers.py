"""Tool-call parsers: parse, round-trip with format_calls, and bad input staying plain text."""

from __future__ import annotations

import pytest

from legorl.proxy.messages import ToolCall, ToolSpec
from legorl.proxy.parsers import available_parsers, get_parser

TOOLS = [
    ToolSpec("bash", "run a command", {"type": "object", "properties": {"cmd": {"type": "string"}}}),
    ToolSpec("add", "add", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
]


def test_registry():
    assert {"hermes", "qwen3_coder"} <= set(available_parsers())
    with pytest.raises(ValueError, match="unknown tool parser"):
        get_parser("nope")


def test_hermes_parse():
    text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'
    r = get_parser("hermes").parse(text, TOOLS)
    assert r.content == "Let me look."
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("bash", {"cmd": "ls -la"})]
    assert r.tool_calls[0].id.startswith("call_")


def test_hermes_bad_blocks_stay_text():
    p = get_parser("hermes")
    for text in [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "unknown_tool", "arguments": {}}</tool_call>',
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "bash", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}',  # unclosed
    ]:
        r = p.parse(text, TOOLS)
        assert r.tool_calls == [] and r.content == text
    mixed = '<tool_call>{"name": "bash", "arguments": {"cmd": "a"}}</tool_call>\n<tool_call>oops</tool_call>'
    r = p.parse(mixed, TOOLS)
    assert len(r.tool_calls) == 1 and r.failures == 1 and "<tool_call>oops</tool_call>" in r.content
    # a call cut off before its closing tag (max_tokens) is a failure too; one that was never opened is not
    cut = '<tool_call>{"name": "bash", "arguments": {"cmd": "a"}}</tool_call>\n<tool_call>{"name": "ba'
    r = p.parse(cut, TOOLS)
    assert len(r.tool_calls) == 1 and r.failures == 1
    assert p.parse('<tool_call>{"name": "bash"', TOOLS).failures == 1
    assert p.parse("no call here", TOOLS).failures == 0


def test_qwen3_coder_parse_types():
    text = (
        "ok\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n40\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=bash>\n<parameter=cmd>\n123\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    r = get_parser("qwen3_coder").parse(text, TOOLS)
    assert r.content == "ok"
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("add", {"a": 2, "b": 40}), ("bash", {"cmd": "123"})]


def test_qwen3_coder_bad_blocks_stay_text():
    p = get_parser("qwen3_coder")
    for text in ["<function=nope>\n</function>", "<function=bash>garbage<parameter=cmd>x</parameter></function>"]:
        r = p.parse(text, TOOLS)
        assert r.tool_calls == [] and r.content == text


@pytest.mark.parametrize("name", ["hermes", "qwen3_coder"])
def test_round_trip(name):
    p = get_parser(name)
    calls = [ToolCall("x", "bash", {"cmd": "echo 'hi'\nls"}), ToolCall("y", "add", {"a": 1, "b": 2})]
    r = p.parse("thinking\n" + p.format_calls(calls), TOOLS)
    assert r.content == "thinking"
    assert [c.key() for c in r.tool_calls] == [c.key() for c in calls]
    prompt = p.system_prompt(TOOLS)
    assert "<tools>" in prompt and '"bash"' in prompt
