"""Protocol-neutral conversation model: both front ends (OpenAI, Anthropic) convert into this.

The accumulator matches histories at this level, so equality here is what decides "the scaffold
sent back what we returned": tool-call ids and JSON spacing are ignored, arguments compare as
parsed JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | str  # a dict when the arguments were a JSON object, else the raw text

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    def key(self) -> tuple[str, str]:
        """Identity for history matching: name + canonical arguments (ids and spacing ignored)."""
        args = self.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return (self.name, args)
        return (self.name, json.dumps(args, sort_keys=True, ensure_ascii=False))


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    @cached_property
    def key(self) -> tuple[Any, ...]:
        """Identity for history matching (cached: messages are not mutated after conversion)."""
        return (self.role, self.content, tuple(c.key() for c in self.tool_calls))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d


@dataclass
class ToolSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @cached_property
    def json(self) -> str:
        """The OpenAI-style JSON of this tool, serialized once per request (tool lists can be large)."""
        return json.dumps(self.to_openai(), ensure_ascii=False)


def tools_fingerprint(tools: list[ToolSpec]) -> str:
    return hashlib.sha1("\n".join(t.json for t in tools).encode()).hexdigest() if tools else ""


ToolChoice = Literal["auto", "none", "required"] | str  # a str other than the three = one named function


@dataclass
class ChatRequest:
    """One call, protocol-neutral: what the capture pipeline needs."""

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    stream: bool = False
    model: str = ""
    call_id_prefix: str = "call_"  # tool-call ids in the protocol's style (Anthropic: toolu_)


def validate_tool_results(messages: list[Message]) -> str | None:
    """Every tool result must answer a call made earlier in the same history; returns an error or None."""
    seen: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "assistant":
            seen.update(c.id for c in m.tool_calls)
        elif m.role == "tool" and m.tool_call_id not in seen:
            return f"messages[{i}]: tool result {m.tool_call_id!r} does not answer any earlier assistant tool call"
    return None
