"""Tool-call parser interface and registry.

A parser owns one text format for tool calls in both directions: it extracts calls from the model's
text, formats past calls back into assistant text (for chat templates without native tool support),
and writes the tool-list instructions those templates get in the system message. Chosen per run by
name (`get_parser("hermes")`).
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from legorl.proxy.messages import ToolCall, ToolSpec


@dataclass
class ParseResult:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    failures: int = 0  # call-shaped blocks that did not parse and were left in `content` as text


def tools_preamble(tools: list[ToolSpec]) -> str:
    """The tool listing every text-format parser puts in the system prompt; each adds its call format."""
    listing = "\n".join(t.json for t in tools)
    return (
        "# Tools\n\n"
        "You can call the functions described below. Their JSON signatures are listed inside "
        "<tools></tools>:\n"
        f"<tools>\n{listing}\n</tools>\n\n"
    )


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class ToolParser(ABC):
    name: str = ""
    # where a call can start in the text: a streamed reply's text stops at the first of these (the rest
    # is parsed at the end). None: unknown, so nothing is streamed before the call is done.
    stream_markers: tuple[str, ...] | None = None
    # calls are `<tool_call>{"name": ..., "arguments": {...}}`: their arguments can stream (proxy/toolstream.py)
    streams_json_calls: bool = False

    @abstractmethod
    def parse(self, text: str, tools: list[ToolSpec]) -> ParseResult:
        """Split model text into plain content and tool calls. Never raises on bad input."""

    @abstractmethod
    def format_calls(self, calls: list[ToolCall]) -> str:
        """Render calls as the model would write them (the inverse of `parse`)."""

    @abstractmethod
    def system_prompt(self, tools: list[ToolSpec]) -> str:
        """Instructions + tool list for templates that cannot render `tools` themselves."""


_REGISTRY: dict[str, type[ToolParser]] = {}


def register_parser(cls: type[ToolParser]) -> type[ToolParser]:
    _REGISTRY[cls.name] = cls
    return cls


def get_parser(name: str) -> ToolParser:
    if name not in _REGISTRY:
        raise ValueError(f"unknown tool parser {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def available_parsers() -> list[str]:
    return sorted(_REGISTRY)
