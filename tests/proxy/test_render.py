"""Rendering: the normalization layer for tool-less templates, and native pass-through."""

from __future__ import annotations

import copy

from legorl.proxy.messages import Message, ToolCall, ToolSpec
from legorl.proxy.parsers import get_parser
from legorl.proxy.render import ChatRenderer

TOOLS = [ToolSpec("bash", "run", {"type": "object", "properties": {"cmd": {"type": "string"}}})]
CONV = [
    Message("user", "list files"),
    Message("assistant", "sure", [ToolCall("c1", "bash", {"cmd": "ls"}), ToolCall("c2", "bash", {"cmd": "pwd"})]),
    Message("tool", "a.txt", tool_call_id="c1"),
    Message("tool", "/root", tool_call_id="c2"),
    Message("user", "thanks"),
]


def test_normalized_chatml(tokenizer):
    r = ChatRenderer(tokenizer, get_parser("hermes"))
    assert not r.native
    msgs, tools = r.template_messages(CONV, TOOLS)
    assert tools is None
    assert msgs[0]["role"] == "system" and "<tools>" in msgs[0]["content"] and '"bash"' in msgs[0]["content"]
    assert msgs[2] == {
        "role": "assistant",
        "content": 'sure\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": "pwd"}}\n</tool_call>',
    }
    # consecutive tool results share one user turn
    assert msgs[3] == {"role": "user", "content": "<tool_response>\na.txt\n</tool_response>\n"
                       "<tool_response>\n/root\n</tool_response>"}
    assert msgs[4] == {"role": "user", "content": "thanks"}
    text = r.render(CONV, TOOLS, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    # an existing system prompt keeps its text, the tool block is appended
    msgs, _ = r.template_messages([Message("system", "be brief"), *CONV], TOOLS)
    assert msgs[0]["content"].startswith("be brief\n\n# Tools")
    # no tools: nothing is injected, the template's default system prompt stays
    assert "SmolLM" in r.render([Message("user", "hi")], [], add_generation_prompt=True)


NATIVE = (
    "{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[call {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_native_templates_get_tools(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = NATIVE
    r = ChatRenderer(tok, get_parser("hermes"))
    assert r.native
    text = r.render(CONV, TOOLS, add_generation_prompt=True)
    assert text.startswith("<tools>[{") and '[call bash {"cmd": "ls"}]' in text
    assert "<|im_start|>tool\na.txt<|im_end|>" in text and "<tool_response>" not in text


def test_boundary_check(tokenizer):
    r = ChatRenderer(tokenizer, get_parser("hermes"))
    ids = r.encode("<|im_start|>assistant\nhello")
    assert r.join_exact([*ids, 2], "\nfoo")  # after a special token: exact by construction
    assert r.join_exact(ids, "<|im_end|>")
    assert not r.join_exact(r.encode("<|im_start|>user\nhel"), "lo world")  # "hel"+"lo" merge
