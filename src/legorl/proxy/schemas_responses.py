"""OpenAI Responses request schema (`POST /v1/responses`) and its conversion to the neutral `ChatRequest`.

Items map onto the same neutral messages as chat completions, so the accumulator sees one conversation
whichever API a scaffold speaks:
- `instructions` -> a leading system message (not carried over by `previous_response_id`, as OpenAI does);
- `message` items (no `type` means message) -> messages; `developer` is `system`; text parts are joined;
- `function_call` items -> tool calls of the assistant message they follow (or of a new, empty one);
- `function_call_output` -> `tool` messages;
- `reasoning` items -> their summary/content text, prepended to the next assistant message ("passed
  through as text": the policy's own thinking already sits in the accumulator as the tokens it sampled);
  `encrypted_content` is opaque and dropped.
Function tools are kept; other tool types (web_search, namespace, local_shell, custom...) are accepted and
left out of the prompt, since the proxy cannot emit their calls. Images, files and item references are 400s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from legorl.proxy.errors import ProxyError
from legorl.proxy.messages import ChatRequest, Message, ToolCall, ToolSpec
from legorl.proxy.schemas_openai import arguments_of


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class TextPart(_Model):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str


class RefusalPart(_Model):
    type: Literal["refusal"]
    refusal: str


class UnsupportedPart(_Model):
    type: Literal["input_image", "input_file", "input_audio"]


Part = Annotated[TextPart | RefusalPart | UnsupportedPart, Field(discriminator="type")]


class MessageItem(_Model):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]


class FunctionCallItem(_Model):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str = ""


class FunctionCallOutputItem(_Model):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[Part]


class ReasoningItem(_Model):
    type: Literal["reasoning"]
    summary: list[TextPart] = []
    content: list[TextPart] | None = None
    encrypted_content: str | None = None


class OtherItem(_Model):
    """Item kinds the proxy cannot take (item_reference, custom/local-shell calls, computer calls...)."""

    type: str


def _item_kind(v: Any) -> str:
    kind = v.get("type", "message") if isinstance(v, dict) else getattr(v, "type", "message")
    return kind if kind in ("message", "function_call", "function_call_output", "reasoning") else "other"


Item = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_kind),
]


class FunctionTool(_Model):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(_Model):
    type: str


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")],
    Discriminator(lambda v: "function" if (v.get("type") if isinstance(v, dict) else v.type) == "function"
                  else "other"),
]


class NamedFunction(_Model):
    type: Literal["function"]
    name: str


class ResponsesRequest(_Model):
    model: str = ""
    input: str | list[Item]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = None  # vLLM extension; <= 0 disables
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)  # not OpenAI's; for reproducible runs
    stop: str | list[str] | None = None  # vLLM extension
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    background: bool = False
    ignore_eos: bool = False  # vLLM extension (benchmarks: fixed-length generations)
    metadata: dict[str, str] | None = None


def _text(content: str | list[Part], where: str) -> str:
    if isinstance(content, str):
        return content
    out = []
    for p in content:
        if isinstance(p, UnsupportedPart):
            raise ProxyError(400, f"{where}: {p.type} content is not supported (text only)", param="input")
        out.append(p.text if isinstance(p, TextPart) else p.refusal)
    return "\n".join(out)


def to_messages(items: list[Item]) -> list[Message]:
    """The conversation the input items describe (without `instructions`)."""
    msgs: list[Message] = []
    thought: list[str] = []  # reasoning text waiting for its assistant message
    for i, it in enumerate(items):
        where = f"input[{i}]"
        if isinstance(it, ReasoningItem):
            thought += [p.text for p in [*it.summary, *(it.content or [])] if p.text]
        elif isinstance(it, MessageItem):
            role = "system" if it.role == "developer" else it.role
            text = _text(it.content, where)
            if role == "assistant" and thought:
                text, thought = "\n".join([*thought, text]) if text else "\n".join(thought), []
            msgs.append(Message(role, text))
        elif isinstance(it, FunctionCallItem):
            call = ToolCall(it.call_id, it.name, arguments_of(it.arguments, where))
            if msgs and msgs[-1].role == "assistant" and not thought:
                last = msgs[-1]
                msgs[-1] = Message("assistant", last.content, [*last.tool_calls, call])
            else:
                msgs.append(Message("assistant", "\n".join(thought), [call]))
                thought = []
        elif isinstance(it, FunctionCallOutputItem):
            msgs.append(Message("tool", _text(it.output, where), tool_call_id=it.call_id))
        else:
            raise ProxyError(400, f"{where}: items of type {it.type!r} are not supported (messages, function_call, "
                             "function_call_output and reasoning are)", param="input")
    return msgs


def function_tools(req: ResponsesRequest) -> list[ToolSpec]:
    return [
        ToolSpec(t.name, t.description or "", t.parameters or {"type": "object", "properties": {}})
        for t in req.tools or [] if isinstance(t, FunctionTool)
    ]


def _choice(c: Any) -> str:
    if c is None or isinstance(c, str):
        return c or "auto"
    if isinstance(c, NamedFunction):
        return c.name
    return "auto"  # allowed_tools / hosted-tool choices: the function tools stay callable


def to_chat_request(
    req: ResponsesRequest, history: list[Message], max_tokens: int | None = None, temperature: float | None = None
) -> tuple[ChatRequest, list[Message]]:
    """(the call, the conversation without instructions: what a response id will refer to).
    `max_tokens` / `temperature`: the route's defaults for a request that names neither."""
    if req.background:
        raise ProxyError(400, "background responses are not supported", param="background")
    items = [MessageItem(role="user", content=req.input)] if isinstance(req.input, str) else req.input
    if not items:
        raise ProxyError(400, "input must not be empty", param="input")
    conversation = [*history, *to_messages(items)]
    head = [Message("system", req.instructions)] if req.instructions else []
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    temp = req.temperature if req.temperature is not None else temperature
    chat = ChatRequest(
        messages=[*head, *conversation], tools=function_tools(req), tool_choice=_choice(req.tool_choice),
        max_tokens=req.max_output_tokens or max_tokens, temperature=1.0 if temp is None else temp,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k if req.top_k and req.top_k > 0 else 0,
        seed=req.seed, stop=stop, ignore_eos=req.ignore_eos, stream=req.stream, model=req.model,
    )
    return chat, conversation
