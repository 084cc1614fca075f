"""Tool-call arguments streamed as they are sampled, for parsers whose calls are JSON (`hermes`).

Once a call's head is in the text (`<tool_call>{"name": "<a tool of the request>", "arguments": {`), its
id and name go out, then its arguments as they grow, re-written on the fly in the form the buffered
response gives them (`json.dumps(..., ensure_ascii=False)`: `JsonCanon`), so the deltas add up to the
same arguments string. At the end of the call `reconcile` pairs the streamed calls with the parsed ones
(the parsed call takes the streamed id) and gives what is left of each; a call that cannot be streamed
(arguments as a string, other key order, an unknown name) is sent whole at the end as before.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace

from legorl.proxy.messages import ToolCall
from legorl.proxy.parsers.base import new_call_id

log = logging.getLogger(__name__)

_HEAD = re.compile(r'<tool_call>\s*\{\s*"name"\s*:\s*("(?:[^"\\\n]|\\.)*")\s*,\s*"arguments"\s*:\s*')
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_WS = " \t\r\n"
_SCALAR = set("0123456789+-.eEtrufalsn")


class JsonCanon:
    """Feeds on raw JSON text, emits it as `json.dumps(value, ensure_ascii=False)` would write the whole
    value: separators `, ` and `: `, no other whitespace, strings re-escaped char by char, numbers and
    literals once complete. `done` once the top value is closed; `broken` on text that is not JSON."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.state = "value"  # value | key | key_or_end | value_or_end | colon | after | string | scalar
        self.is_key = False
        self.buf = ""  # a pending escape or scalar
        self.high = ""  # a high surrogate waiting for its pair
        self.done = False
        self.broken = False
        self.consumed = 0  # raw chars taken

    def feed(self, raw: str) -> str:
        out: list[str] = []
        for ch in raw:
            if self.done or self.broken:
                break
            self._char(ch, out)
            if not self.broken:
                self.consumed += 1
        return "".join(out)

    def _fail(self) -> None:
        self.broken = True

    def _close_value(self) -> None:
        self.state = "after" if self.stack else "done"
        if not self.stack:
            self.done = True

    def _char(self, ch: str, out: list[str]) -> None:
        s = self.state
        if s == "string":
            self._string(ch, out)
        elif s == "scalar":
            if ch in _SCALAR:
                self.buf += ch
                return
            try:
                out.append(json.dumps(json.loads(self.buf), ensure_ascii=False))
            except ValueError:
                return self._fail()
            self.buf = ""
            self._close_value()
            if not self.done:
                self._char(ch, out)
        elif ch in _WS:
            return
        elif s in ("value", "value_or_end"):
            if s == "value_or_end" and ch == "]":
                out.append(ch)
                self.stack.pop()
                return self._close_value()
            if ch in "{[":
                out.append(ch)
                self.stack.append(ch)
                self.state = "key_or_end" if ch == "{" else "value_or_end"
            elif ch == '"':
                out.append(ch)
                self.state, self.is_key = "string", False
            elif ch in _SCALAR:
                self.state, self.buf = "scalar", ch
            else:
                self._fail()
        elif s in ("key", "key_or_end"):
            if s == "key_or_end" and ch == "}":
                out.append(ch)
                self.stack.pop()
                return self._close_value()
            if ch != '"':
                return self._fail()
            out.append(ch)
            self.state, self.is_key = "string", True
        elif s == "colon":
            if ch != ":":
                return self._fail()
            out.append(": ")
            self.state = "value"
        elif s == "after":
            top = self.stack[-1]
            if ch == ",":
                out.append(", ")
                self.state = "key" if top == "{" else "value"
            elif ch == ("}" if top == "{" else "]"):
                out.append(ch)
                self.stack.pop()
                self._close_value()
            else:
                self._fail()
        else:
            self._fail()

    def _string(self, ch: str, out: list[str]) -> None:
        if self.buf:  # inside an escape
            self.buf += ch
            if self.buf[1] == "u" and len(self.buf) < 6:
                return
            try:
                text = json.loads(f'"{self.buf}"')
            except ValueError:
                return self._fail()
            self.buf = ""
            if self.high:
                text, self.high = self.high + text, ""
                try:
                    text = text.encode("utf-16", "surrogatepass").decode("utf-16")
                except UnicodeDecodeError:
                    return self._fail()
            elif len(text) == 1 and 0xD800 <= ord(text) <= 0xDBFF:
                self.high = text
                return
            out.append(json.dumps(text, ensure_ascii=False)[1:-1])
        elif ch == "\\":
            self.buf = ch
        elif self.high:
            self._fail()  # a high surrogate escape not followed by its low half: left to the final parse
        elif ch == '"':
            out.append(ch)
            if self.is_key:
                self.state = "colon"
            else:
                self._close_value()
        elif ord(ch) < 0x20:
            self._fail()  # a raw control character: not JSON
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])


@dataclass
class StreamedCall:
    index: int  # its place among the streamed calls (the chat API's `index`)
    id: str
    name: str
    args: str = ""  # arguments text sent so far
    complete: bool = False  # the arguments object is closed


class CallStream:
    """Finds streamable calls in the tool region of a reply (the text from the first call opener on)
    and yields ("start", call) / ("args", call, delta) events as the text grows."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.calls: list[StreamedCall] = []
        self._pos = 0  # where the next call is looked for
        self._canon: JsonCanon | None = None
        self._args_at = 0  # raw text offset of the current call's arguments

    def poll(self, text: str) -> list[tuple]:
        events: list[tuple] = []
        while True:
            if self._canon is None:
                at = text.find(_OPEN, self._pos)
                if at < 0:
                    return events
                m = _HEAD.match(text, at)
                end = text.find(_CLOSE, at)
                if m is None or m.end() >= len(text):
                    if end >= 0:  # a block that cannot stream (other layout): it is sent whole at the end
                        self._pos = end + len(_CLOSE)
                        continue
                    return events
                try:
                    name = json.loads(m.group(1))
                except ValueError:
                    name = None
                if name not in self.known or text[m.end()] != "{" or (0 <= end < m.end()):
                    if end < 0:
                        return events  # wait for the block's end, then skip it
                    self._pos = end + len(_CLOSE)
                    continue
                call = StreamedCall(len(self.calls), new_call_id(), name)
                self.calls.append(call)
                self._canon, self._args_at = JsonCanon(), m.end()
                events.append(("start", call))
            canon, call = self._canon, self.calls[-1]
            delta = canon.feed(text[self._args_at + canon.consumed :]) if not call.complete else ""
            if delta:
                call.args += delta
                events.append(("args", call, delta))
            if canon.broken:
                self._canon = None
                end = text.find(_CLOSE, self._args_at)
                self._pos = end + len(_CLOSE) if end >= 0 else len(text) + 1
                return events
            if not canon.done:
                return events
            call.complete = True
            end = text.find(_CLOSE, self._args_at + canon.consumed)
            if end < 0:
                return events
            self._canon, self._pos = None, end + len(_CLOSE)


def reconcile(streamed: list[StreamedCall], calls: list[ToolCall]) -> tuple[list[ToolCall], list[tuple]]:
    """Pairs the parsed calls with the streamed ones, in order, by name and arguments prefix. Returns the
    calls (a streamed one keeps the streamed id) and, per call, (streamed call or None, arguments left)."""
    out: list[ToolCall] = []
    plan: list[tuple] = []
    k = 0
    for c in calls:
        full = c.arguments_json()
        s = streamed[k] if k < len(streamed) else None
        if s is not None and s.name == c.name and full.startswith(s.args):
            out.append(replace(c, id=s.id))
            plan.append((s, full[len(s.args):]))
            k += 1
        else:
            out.append(c)
            plan.append((None, full))
    for s in streamed[k:]:
        log.warning("a streamed tool call (%s, %d chars of arguments) is not in the parsed reply", s.name, len(s.args))
    return out, plan
