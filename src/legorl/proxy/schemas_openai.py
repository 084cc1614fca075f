"""OpenAI chat-completions request schema and its conversion to the neutral `ChatRequest`.

Unknown fields are accepted (clients send many); wrong types and unknown roles are 400s.
Penalties, `response_format`, `user`, `parallel_tool_calls` are accepted and ignored.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from legorl.proxy.errors import ProxyError
from legorl.proxy.messages import ChatRequest, Message, ToolCall, ToolSpec


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class TextPart(_Model):
    type: Literal["text"]
    text: str


class FunctionCall(_Model):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Model):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class MessageIn(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class FunctionSpec(_Model):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolIn(_Model):
    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Model):
    include_usage: bool = False


class ChatCompletionRequest(_Model):
    model: str = ""
    messages: list[MessageIn] = Field(min_length=1)
    tools: list[ToolIn] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None  # vLLM extension; <= 0 disables
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    ignore_eos: bool = False  # vLLM extension (benchmarks: fixed-length generations)


def _text(content: str | list[TextPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content)


def arguments_of(raw: str | dict[str, Any], where: str, param: str = "messages") -> dict[str, Any] | str:
    """A tool call's arguments as sent: a JSON object parsed, anything else kept as the raw text."""
    if isinstance(raw, dict):
        return raw
    try:
        val = json.loads(raw)
    except ValueError:
        return raw
    except RecursionError as exc:  # a JSON string nested deeper than Python's parser goes
        raise ProxyError(400, f"{where}: arguments JSON nested too deeply", param=param) from exc
    return val if isinstance(val, dict) else raw


def to_chat_request(req: ChatCompletionRequest) -> ChatRequest:
    if req.n not in (None, 1):
        raise ProxyError(400, "only n=1 is supported", param="n")
    msgs: list[Message] = []
    for i, m in enumerate(req.messages):
        role = "system" if m.role == "developer" else m.role
        if role == "tool" and not m.tool_call_id:
            raise ProxyError(400, f"messages[{i}]: a tool message needs tool_call_id", param="messages")
        calls = [ToolCall(c.id, c.function.name, arguments_of(c.function.arguments, f"messages[{i}].tool_calls[{j}]"))
                 for j, c in enumerate(m.tool_calls or [])]
        if calls and role != "assistant":
            raise ProxyError(400, f"messages[{i}]: only assistant messages carry tool_calls", param="messages")
        msgs.append(Message(role, _text(m.content), calls, m.tool_call_id if role == "tool" else None, m.name))
    tools = [
        ToolSpec(t.function.name, t.function.description or "", t.function.parameters or {"type": "object",
                                                                                          "properties": {}})
        for t in req.tools or []
    ]
    choice = req.tool_choice
    tool_choice = choice.function.name if isinstance(choice, NamedToolChoice) else (choice or "auto")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    top_k = req.top_k if req.top_k and req.top_k > 0 else 0
    return ChatRequest(
        messages=msgs, tools=tools, tool_choice=tool_choice,
        max_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=top_k, seed=req.seed, stop=stop,
        ignore_eos=req.ignore_eos, stream=req.stream, model=req.model,
    )
