"""Turn one incoming history into engine prompt ids against a session's branches.

Rule (see docs/proxy.md):
1. extension: the history starts with everything a branch holds (its messages + the reply we sent,
   compared as `Message.key`), same tools -> append only the new text's tokens to that branch;
2. rewrite: otherwise a branch with the same anchor (system prompt, tools, first non-system message)
   -> fork at the last checkpoint inside the shared message prefix, re-tokenize from there; those
   tokens are rescored with `prompt_logprobs` and the cut-off tail is kept in `superseded`;
3. else a new branch (sub-agent, title generator, a compaction that replaced the whole history).

New text after a reply: the template's text after the end-of-turn token the model emitted (e.g. "\\n")
+ the new messages + the generation prompt, taken as the difference between one-shot renders, so the
branch decodes to the one-shot render of the whole conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from legorl.proxy.accumulator import Branch
from legorl.proxy.messages import Message, ToolSpec, tools_fingerprint
from legorl.proxy.render import ChatRenderer

PlanKind = Literal["extend", "rewrite", "new"]


@dataclass
class Plan:
    kind: PlanKind
    branch: Branch  # for "new": not yet attached to the session
    fork: int  # branch tokens [0, fork) are kept
    new_ids: list[int]
    prompt_text: str
    messages: list[Message]
    checkpoints: dict[int, int] = field(default_factory=dict)
    boundary_exact: bool = True
    drift: bool = False  # extension whose template re-rendered the previous reply differently
    retry: bool = False  # rewrite whose history is a prefix of the branch's (the same question again)

    @property
    def prompt_ids(self) -> list[int]:
        return self.branch.ids[: self.fork] + self.new_ids

    @property
    def prompt_len(self) -> int:
        return self.fork + len(self.new_ids)


def anchor_of(messages: list[Message], tools_fp: str) -> tuple:
    system = messages[0].content if messages and messages[0].role == "system" else None
    first = next((m.key for m in messages if m.role != "system"), None)
    return (system, tools_fp, first)


def shared_prefix(a: list[Message], b: list[Message]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x.key != y.key:
            break
        n += 1
    return n


class PromptTooLong(Exception):
    """The rendered prompt has more characters than any prompt that fits the window (not tokenized)."""

    def __init__(self, chars: int):
        super().__init__(chars)
        self.chars = chars


def plan_call(
    renderer: ChatRenderer, branches: list[Branch], messages: list[Message], tools: list[ToolSpec],
    max_chars: int | None = None,
) -> Plan:
    fp = tools_fingerprint(tools)
    full = renderer.render(messages, tools, add_generation_prompt=True)
    if max_chars is not None and len(full) > max_chars:
        raise PromptTooLong(len(full))
    best: Branch | None = None
    for b in branches:
        n = len(b.messages)
        longer = best is None or n > len(best.messages)
        if longer and b.tools_fp == fp and 0 < n < len(messages) and shared_prefix(messages, b.messages) == n:
            best = b
    if best is not None:
        plan = _extend(renderer, best, messages, tools, full)
        if plan is not None:
            return plan
    anchor = anchor_of(messages, fp)
    same = [b for b in branches if b.anchor == anchor]
    if same:
        b = max(same, key=lambda x: shared_prefix(messages, x.messages))
        return _rewrite(renderer, b, messages, tools, full, shared_prefix(messages, b.messages))
    kind = "main" if not branches else "sub"
    branch = Branch(index=len(branches), kind=kind, anchor=anchor, tools=tools, tools_fp=fp)
    return Plan("new", branch, 0, renderer.encode(full), full, messages)


def _extend(
    renderer: ChatRenderer, b: Branch, messages: list[Message], tools: list[ToolSpec], full: str
) -> Plan | None:
    """Append-only plan, or None when the template output does not line up (then: rewrite).

    Normal case: the render up to the reply is a prefix of the full render; the new text is the
    template's text after the stop token the model emitted, then everything after that render.
    Drift case: the template renders the last reply differently once more turns follow (e.g. it drops
    past reasoning); the reply's tokens stay as sampled and the new text starts after the first turn
    end following the previous prompt.
    """
    s = len(b.messages)
    prev = b.last_prompt_text
    if not full.startswith(prev):
        return None
    stop_text = None
    if b.reply_stop_id is not None:
        stop_text = renderer.stop_texts.get(b.reply_stop_id) or renderer.decode([b.reply_stop_id])
    base = b.base_text  # the render of what we hold; the client's echo must render the same to use it
    if base is None or not full.startswith(base):
        base = renderer.render(messages[:s], tools, add_generation_prompt=False)
    if not (full.startswith(base) and base.startswith(prev)):
        hits = [(i, t) for t in ([stop_text] if stop_text else renderer.stop_texts.values())
                if (i := full.find(t, len(prev))) >= 0]
        if not hits:
            return None
        idx, t = min(hits)
        new_text = full[idx + len(t) :] if stop_text else full[idx:]
        exact = renderer.join_exact(b.ids, new_text)
        return Plan("extend", b, len(b.ids), renderer.encode(new_text), full, messages, {}, exact, drift=True)
    region = base[len(prev) :]  # the reply as the template renders it, + turn end
    tail = _reply_tail(renderer, region, stop_text, b.messages[-1])
    rest = full[len(base) :]
    exact = renderer.join_exact(b.ids, tail + rest)
    tail_ids = renderer.encode(tail)
    if not tail or renderer.ends_special(tail) or renderer.starts_special(rest):
        new_ids = tail_ids + renderer.encode(rest)
        checkpoints = {s: len(b.ids) + len(tail_ids)}
    else:
        new_ids = renderer.encode(tail + rest)
        same = new_ids[: len(tail_ids)] == tail_ids
        checkpoints = {s: len(b.ids) + len(tail_ids)} if same else {}
    return Plan("extend", b, len(b.ids), new_ids, full, messages, checkpoints, exact)


def _reply_tail(renderer: ChatRenderer, region: str, stop_text: str | None, reply: Message) -> str:
    """The template's text after the reply's sampled tokens: new context (mask 0)."""
    if stop_text is not None and (idx := region.rfind(stop_text)) >= 0:
        return region[idx + len(stop_text) :]  # after the end-of-turn token the model emitted
    pos = region.find(reply.content) if reply.content and not reply.tool_calls else -1
    if pos >= 0:  # a plain reply: everything after its text
        return region[pos + len(reply.content) :]
    idx = max((region.rfind(t) for t in renderer.stop_texts.values()), default=-1)
    return region[idx:] if idx >= 0 else ""  # from the template's own turn end


def _rewrite(
    renderer: ChatRenderer, b: Branch, messages: list[Message], tools: list[ToolSpec], full: str, shared: int
) -> Plan:
    k = max(c for c in b.checkpoints if c <= shared)
    base = renderer.render(messages[:k], tools, add_generation_prompt=False) if k else ""
    if not full.startswith(base):
        k, base = 0, ""
    fork = b.checkpoints[k]
    new_ids = renderer.encode(full[len(base) :])
    exact = renderer.join_exact(b.ids[:fork], full[len(base) :])
    retry = shared == len(messages)
    return Plan("rewrite", b, fork, new_ids, full, messages, {}, exact, retry=retry)
