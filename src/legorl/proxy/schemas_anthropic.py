"""Anthropic Messages request schema and its conversion to the neutral `ChatRequest`.

A user message's `tool_result` blocks become `tool` messages (in order) followed by a user message
with its remaining text; `thinking` blocks are dropped (the policy's own tokens stay in the
accumulator); images and documents are 400s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from legorl.proxy.errors import ProxyError
from legorl.proxy.messages import ChatRequest, Message, ToolCall, ToolSpec


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class TextBlock(_Model):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Model):
    type: Literal["thinking", "redacted_thinking"]


Block = Annotated[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock, Field(discriminator="type")]


class MessageIn(_Model):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolIn(_Model):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class ToolChoice(_Model):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class CountTokensRequest(_Model):
    model: str = ""
    messages: list[MessageIn] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    stream: bool = False
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # not in Anthropic's API; accepted for reproducible runs
    ignore_eos: bool = False  # not in Anthropic's API (vLLM's extension): fixed-length generations for benchmarks


def _text(content: str | list[TextBlock] | None) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "\n".join(b.text for b in content)


def _convert_message(m: MessageIn) -> list[Message]:
    if isinstance(m.content, str):
        return [Message(m.role, m.content)]
    texts = [b.text for b in m.content if isinstance(b, TextBlock)]
    if m.role == "assistant":
        calls = [ToolCall(b.id, b.name, b.input) for b in m.content if isinstance(b, ToolUseBlock)]
        if any(isinstance(b, ToolResultBlock) for b in m.content):
            raise ProxyError(400, "tool_result blocks belong in user messages")
        return [Message("assistant", "".join(texts), calls)]
    if any(isinstance(b, ToolUseBlock) for b in m.content):
        raise ProxyError(400, "tool_use blocks belong in assistant messages")
    out = [
        Message("tool", _text(b.content), tool_call_id=b.tool_use_id)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    if texts or not out:
        out.append(Message("user", "\n".join(texts)))
    return out


def _tools(req: CountTokensRequest) -> list[ToolSpec]:
    return [
        ToolSpec(t.name, t.description or "", t.input_schema or {"type": "object", "properties": {}})
        for t in req.tools or []
    ]


def _choice(c: ToolChoice | None) -> str:
    if c is None or c.type == "auto":
        return "auto"
    if c.type == "tool":
        if not c.name:
            raise ProxyError(400, "tool_choice of type 'tool' needs a name")
        return c.name
    return "required" if c.type == "any" else "none"


def to_messages(req: CountTokensRequest) -> list[Message]:
    msgs: list[Message] = []
    if req.system:
        msgs.append(Message("system", _text(req.system)))
    for m in req.messages:
        msgs.extend(_convert_message(m))
    return msgs


def to_chat_request(req: MessagesRequest) -> ChatRequest:
    return ChatRequest(
        messages=to_messages(req), tools=_tools(req), tool_choice=_choice(req.tool_choice),
        max_tokens=req.max_tokens, temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k or 0, seed=req.seed,
        stop=list(req.stop_sequences or []), stream=req.stream, model=req.model, call_id_prefix="toolu_",
        ignore_eos=req.ignore_eos,
    )


def count_request(req: CountTokensRequest) -> tuple[list[Message], list[ToolSpec]]:
    return to_messages(req), _tools(req)
