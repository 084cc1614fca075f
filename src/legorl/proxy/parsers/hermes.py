"""`hermes`: each call is a JSON object `{"name": ..., "arguments": {...}}` inside <tool_call> tags."""

from __future__ import annotations

import json
import re

from legorl.proxy.messages import ToolCall, ToolSpec
from legorl.proxy.parsers.base import (
    ParseResult,
    ToolParser,
    new_call_id,
    register_parser,
    tools_preamble,
)

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _decode(body: str, known: set[str]) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if known and obj["name"] not in known:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(id=new_call_id(), name=obj["name"], arguments=args)


@register_parser
class HermesParser(ToolParser):
    name = "hermes"
    stream_markers = ("<tool_call>",)
    streams_json_calls = True

    def parse(self, text: str, tools: list[ToolSpec]) -> ParseResult:
        if "<tool_call>" not in text:
            return ParseResult(text)
        known = {t.name for t in tools}
        calls: list[ToolCall] = []
        kept: list[str] = []
        failures, pos = 0, 0
        for m in _BLOCK.finditer(text):
            call = _decode(m.group(1).strip(), known)
            kept.append(text[pos : m.start()])
            if call is None:
                failures += 1
                kept.append(m.group(0))
            else:
                calls.append(call)
            pos = m.end()
        kept.append(text[pos:])
        failures += int("<tool_call>" in text[pos:])  # opened, never closed: a reply cut at max_tokens
        return ParseResult("".join(kept).strip() if calls else text, calls, failures)

    def format_calls(self, calls: list[ToolCall]) -> str:
        blocks = []
        for c in calls:
            args = c.arguments if isinstance(c.arguments, dict) else c.arguments_json()
            body = json.dumps({"name": c.name, "arguments": args}, ensure_ascii=False)
            blocks.append(f"<tool_call>\n{body}\n</tool_call>")
        return "\n".join(blocks)

    def system_prompt(self, tools: list[ToolSpec]) -> str:
        return tools_preamble(tools) + (
            "To call a function, reply with one block per call, each holding a JSON object with the "
            "function name and its arguments:\n"
            '<tool_call>\n{"name": "<function name>", "arguments": {<arguments as JSON>}}\n</tool_call>'
        )
