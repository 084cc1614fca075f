"""`qwen3_coder`: XML calls `<function=name><parameter=x>value</parameter></function>`.

Parameter values are raw text; they are typed through the tool's JSON schema (a non-string
parameter is JSON-decoded when it can be, else kept as the string).
"""

from __future__ import annotations

import json
import re
from typing import Any

from legorl.proxy.messages import ToolCall, ToolSpec
from legorl.proxy.parsers.base import (
    ParseResult,
    ToolParser,
    new_call_id,
    register_parser,
    tools_preamble,
)

_CALL = re.compile(r"(?:<tool_call>\s*)?<function=([^>\n]+)>(.*?)</function>(?:\s*</tool_call>)?", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _strip_newlines(v: str) -> str:
    if v.startswith("\n"):
        v = v[1:]
    if v.endswith("\n"):
        v = v[:-1]
    return v


def _typed(value: str, schema: dict[str, Any] | None) -> Any:
    kind = (schema or {}).get("type")
    if kind == "string":
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


@register_parser
class Qwen3CoderParser(ToolParser):
    name = "qwen3_coder"
    stream_markers = ("<tool_call>", "<function=")

    def parse(self, text: str, tools: list[ToolSpec]) -> ParseResult:
        if "<function=" not in text:
            return ParseResult(text)
        by_name = {t.name: t for t in tools}
        calls: list[ToolCall] = []
        kept: list[str] = []
        failures, pos = 0, 0
        for m in _CALL.finditer(text):
            name, body = m.group(1).strip(), m.group(2)
            kept.append(text[pos : m.start()])
            pos = m.end()
            leftover = _PARAM.sub("", body).strip()
            if (by_name and name not in by_name) or leftover:
                failures += 1
                kept.append(m.group(0))
                continue
            props = (by_name[name].parameters.get("properties") or {}) if name in by_name else {}
            args = {
                k.strip(): _typed(_strip_newlines(v), props.get(k.strip())) for k, v in _PARAM.findall(body)
            }
            calls.append(ToolCall(id=new_call_id(), name=name, arguments=args))
        kept.append(text[pos:])
        return ParseResult("".join(kept).strip() if calls else text, calls, failures)

    def format_calls(self, calls: list[ToolCall]) -> str:
        blocks = []
        for c in calls:
            args = c.arguments if isinstance(c.arguments, dict) else {"arguments": c.arguments}
            params = "".join(
                f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
                for k, v in args.items()
            )
            blocks.append(f"<tool_call>\n<function={c.name}>\n{params}</function>\n</tool_call>")
        return "\n".join(blocks)

    def system_prompt(self, tools: list[ToolSpec]) -> str:
        return tools_preamble(tools) + (
            "To call a function, reply with one block per call in this format:\n"
            "<tool_call>\n<function=FUNCTION_NAME>\n<parameter=PARAMETER_NAME>\nvalue\n</parameter>\n"
            "</function>\n</tool_call>"
        )
