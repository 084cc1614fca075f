"""`POST .../v1/responses`: the OpenAI Responses API (JSON, or the SSE event sequence the `openai` SDK
and Codex parse), over the same capture path as chat completions: one accumulator, prefix check, masks.

A response id refers to its conversation (input items, minus `instructions`, plus the reply), kept by the
session (`Session.responses`, bounded) unless `store` is false, so `previous_response_id` continues it.
One-request sessions (`legorl serve` without X-Session-ID) share the server's store instead.

A scaffold that cannot set sampling options (Codex sends no `max_output_tokens` or temperature) can
send them as headers, which apply when the body has none: `X-Legorl-Max-Output-Tokens`,
`X-Legorl-Temperature`.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from legorl.proxy.capture import CallResult
from legorl.proxy.errors import ProxyError
from legorl.proxy.headers import MAX_OUTPUT_HEADER, TEMPERATURE_HEADER, header_number
from legorl.proxy.messages import Message
from legorl.proxy.schemas_responses import FunctionTool, ResponsesRequest, to_chat_request
from legorl.proxy.sse import chunks, event, json_response
from legorl.proxy.streaming import run_stream, text_stream
from legorl.proxy.toolstream import StreamedCall


class ResponseStore:
    """response id -> the conversation it ends (oldest dropped past `limit`)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._items: OrderedDict[str, list[Message]] = OrderedDict()

    def get(self, response_id: str) -> list[Message]:
        conv = self._items.get(response_id)
        if conv is None:
            raise ProxyError(400, f"previous response {response_id!r} not found (unknown, stored with store=false, "
                             f"or older than the last {self.limit} of this session)", code="previous_response_not_found",
                             param="previous_response_id")
        self._items.move_to_end(response_id)
        return conv

    def put(self, response_id: str, conversation: list[Message]) -> None:
        self._items[response_id] = conversation
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def _usage(r: CallResult) -> dict[str, Any]:
    return {
        "input_tokens": r.prompt_tokens,
        "input_tokens_details": {"cached_tokens": r.cached_tokens},
        "output_tokens": r.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": r.prompt_tokens + r.completion_tokens,
    }


class ResponseEvents:
    """Builds one response's output items and its SSE events in order: `start`, then a message item
    whose text deltas go out as sampled (`open_message`, `text`, `close_message`), function calls whose
    argument deltas go out as sampled (`open_call`, `call_delta`, `close_call`; whole at the end where the
    parser cannot stream them), a message for text after the calls, and `finish`. As a `StreamProtocol` (head/delta/tail) it feeds `run_stream`."""

    def __init__(self, req: ResponsesRequest, model: str, response_id: str | None = None) -> None:
        self.req, self.model = req, model
        self.id = response_id or "resp_" + secrets.token_hex(24)
        self.created = int(time.time())
        self.output: list[dict[str, Any]] = []
        self.events: list[str] = []
        self._seq = 0
        self._msg: dict[str, Any] | None = None  # the open message item
        self._text: list[str] = []
        self._call: tuple[int, dict[str, Any]] | None = None  # the open function_call item (index, head)
        self._args: list[str] = []
        self.on_done: Callable[[CallResult], None] | None = None  # before the final events are written

    def emit(self, kind: str, **body: Any) -> None:
        self.events.append(event({"type": kind, "sequence_number": self._seq, **body}, kind))
        self._seq += 1

    def body(self, status: str, result: CallResult | None = None) -> dict[str, Any]:
        req = self.req
        tools = [t.model_dump(exclude_none=True) for t in req.tools or [] if isinstance(t, FunctionTool)]
        choice = req.tool_choice
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "completed_at": int(time.time()) if result is not None else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens, "model": self.model,
            "output": list(self.output) if result is not None else [],
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": None, "summary": None}, "store": req.store,
            "temperature": req.temperature, "text": {"format": {"type": "text"}},
            "tool_choice": choice.model_dump() if hasattr(choice, "model_dump") else (choice or "auto"),
            "tools": tools, "top_p": req.top_p, "truncation": "disabled",
            "usage": _usage(result) if result is not None else None,
            "metadata": req.metadata or {}, "user": None,
        }

    def start(self) -> None:
        self.emit("response.created", response=self.body("in_progress"))
        self.emit("response.in_progress", response=self.body("in_progress"))

    def open_message(self) -> None:
        i, item_id = len(self.output), "msg_" + secrets.token_hex(24)
        self._msg = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        self._text = []
        self.emit("response.output_item.added", output_index=i, item=self._msg)
        self.emit("response.content_part.added", **self._where(),
                  part={"type": "output_text", "text": "", "annotations": []})

    def _where(self) -> dict[str, Any]:
        assert self._msg is not None
        return {"item_id": self._msg["id"], "output_index": len(self.output), "content_index": 0}

    def text(self, piece: str) -> None:
        if self._msg is None:
            self.open_message()
        self._text.append(piece)
        self.emit("response.output_text.delta", **self._where(), delta=piece, logprobs=[])

    def close_message(self, status: str) -> None:
        if self._msg is None:
            self.open_message()
        where, text = self._where(), "".join(self._text)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        self.emit("response.output_text.done", **where, text=text, logprobs=[])
        self.emit("response.content_part.done", **where, part=part)
        item = {**self._msg, "status": status, "content": [part]}
        self.output.append(item)
        self._msg = None
        self.emit("response.output_item.done", output_index=where["output_index"], item=item)

    def function_call(self, call_id: str, name: str, arguments: str) -> None:
        self.open_call(call_id, name)
        for p in chunks(arguments):
            self.call_delta(p)
        self.close_call(arguments)

    def open_call(self, call_id: str, name: str) -> None:
        """A function_call item whose arguments follow as deltas; the open message (text before it) closes."""
        if self._msg is not None:
            self.close_message("completed")
        self.close_call()
        i, item_id = len(self.output), "fc_" + secrets.token_hex(24)
        head = {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": name,
                "arguments": ""}
        self.output.append(head)  # holds its place; replaced when done
        self._call, self._args = (i, head), []
        self.emit("response.output_item.added", output_index=i, item=head)

    def call_delta(self, piece: str) -> None:
        assert self._call is not None
        i, head = self._call
        self._args.append(piece)
        self.emit("response.function_call_arguments.delta", item_id=head["id"], output_index=i, delta=piece)

    def close_call(self, arguments: str | None = None) -> None:
        if self._call is None:
            return
        (i, head), self._call = self._call, None
        arguments = "".join(self._args) if arguments is None else arguments
        self.emit("response.function_call_arguments.done", item_id=head["id"], output_index=i, name=head["name"],
                  arguments=arguments)
        item = {**head, "status": "completed", "arguments": arguments}
        self.output[i] = item
        self.emit("response.output_item.done", output_index=i, item=item)

    def finish(self, result: CallResult) -> dict[str, Any]:
        status = "incomplete" if result.finish == "length" else "completed"
        body = self.body(status, result)
        self.emit(f"response.{status}", response=body)
        return body

    def drain(self) -> list[str]:
        out, self.events = self.events, []
        return out

    def outputs(self, result: CallResult, rest: str, plan: list[tuple] | None = None) -> None:
        """The rest of the reply once the call is done: the last streamed call's arguments, the message
        (text not streamed yet), then the calls that did not stream."""
        status = "incomplete" if result.finish == "length" else "completed"
        plan = plan or [(None, c.arguments_json()) for c in result.tool_calls]
        streamed = [(s, args) for s, args in plan if s is not None]
        if self._call is not None and streamed:
            for p in chunks(streamed[-1][1]):
                self.call_delta(p)
        self.close_call()
        if self._msg is not None or rest or not result.tool_calls:
            for p in chunks(rest):
                self.text(p)
            self.close_message(status)
        for c, (s, args) in zip(result.tool_calls, plan, strict=True):
            if s is None:
                self.function_call(c.id, c.name, args)

    # -- StreamProtocol ---------------------------------------------------------------------------
    def head(self, prompt_tokens: int) -> list[str]:
        self.start()
        return self.drain()

    def delta(self, piece: str) -> list[str]:
        self.text(piece)
        return self.drain()

    def call_start(self, call: StreamedCall) -> list[str]:
        self.open_call(call.id, call.name)
        return self.drain()

    def call_args(self, call: StreamedCall, delta: str) -> list[str]:
        self.call_delta(delta)
        return self.drain()

    def tail(self, result: CallResult, rest: str, plan: list[tuple]) -> list[str]:
        if self.on_done is not None:
            self.on_done(result)
        self.outputs(result, rest, plan)
        self.finish(result)
        return self.drain()

    def error(self, err: ProxyError) -> list[str]:
        body = {**self.body("failed"), "error": {"code": err.code or "server_error", "message": err.message}}
        self.emit("response.failed", response=body)
        return self.drain()


def _store_of(server, session) -> ResponseStore:
    if getattr(session, "one_request", False):
        return server.bare_responses
    if session.responses is None:
        session.responses = ResponseStore(server.config.max_stored_responses)
    return session.responses


async def responses(server, request: web.Request, session) -> web.StreamResponse:
    max_tokens = header_number(request, MAX_OUTPUT_HEADER, int)
    temperature = header_number(request, TEMPERATURE_HEADER, float)
    store = _store_of(server, session)
    async with server.intake.lane(request) as lane:
        req = await lane.offload(ResponsesRequest.model_validate_json, await server.intake.read(request, lane))
        history = store.get(req.previous_response_id) if req.previous_response_id else []
        chat, conversation = await lane.offload(to_chat_request, req, history, max_tokens, temperature)
        ev = ResponseEvents(req, req.model or server.config.model_name)
        if req.store:  # stored before the client can see the response id
            ev.on_done = lambda r: store.put(ev.id, [*conversation, Message("assistant", r.content, r.tool_calls)])
        if req.stream:
            text = text_stream(server.renderer, chat)
            _, resp = await run_stream(request, server.capture.call(session, chat, lane, text), text, ev, session.counters)
            return resp
        result = await server.capture.call(session, chat, lane)
    if ev.on_done is not None:
        ev.on_done(result)
    ev.start()
    ev.outputs(result, result.content)
    return json_response(request, ev.finish(result), result.engine_s)
