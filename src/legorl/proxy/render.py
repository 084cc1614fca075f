"""Chat-template rendering and tokenization for the proxy.

Two modes, picked from the template itself (`supports_tools`):
- native: messages with `tool_calls` / `tool` roles and the `tools` list go to the template as is;
- normalized (templates that only render `role` + string `content`, e.g. SmolLM2's ChatML): the tool
  list and calling instructions are appended to the system message (one is created when missing), an
  assistant's tool calls are written into its content in the run's parser format, and tool results
  become a `user` turn of `<tool_response>` blocks (consecutive results share one turn).

Token-level concerns (boundaries between separately tokenized pieces) live here too: HF tokenizers
split on added special tokens before anything else, so a boundary next to one is always exact.
"""

from __future__ import annotations

from typing import Any

from legorl.models.chat import encode_text, stop_token_ids, supports_tools
from legorl.proxy.errors import ProxyError
from legorl.proxy.messages import Message, ToolCall, ToolSpec, tools_fingerprint
from legorl.proxy.parsers import ToolParser

LARGE_TEXT = 1 << 16  # characters; longer texts are tokenized with the GIL released (see `encode`)


class ChatRenderer:
    def __init__(self, tokenizer: Any, parser: ToolParser, native_tools: bool | None = None):
        self.tok = tokenizer
        self.parser = parser
        self.native = supports_tools(tokenizer) if native_tools is None else native_tools
        self.stop_ids = stop_token_ids(tokenizer)
        self.stop_texts = {i: tokenizer.convert_ids_to_tokens(i) for i in self.stop_ids}
        added = tokenizer.added_tokens_decoder  # id -> AddedToken
        self.special_ids = {i for i, t in added.items() if t.special} | set(tokenizer.all_special_ids)
        self.special_texts = tuple(sorted({added[i].content for i in added if i in self.special_ids}, key=len))
        self._prompts: dict[str, str] = {}
        # the most characters one token can stand for (a token's text is never shorter than what it
        # decodes to): a prompt over window * this many characters cannot fit, whatever it says. A
        # normalizer may shrink the text first (e.g. NFC composes characters): then allow 4x.
        self.max_token_chars = max((len(t) for t in tokenizer.get_vocab()), default=1)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        normalizer = getattr(backend, "normalizer", None) if backend is not None else True
        self.chars_margin = 1.25 if normalizer is None else 4.0
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._compiled = _compiled_template(tokenizer)
        self._template_kwargs = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
        if not self._fast_paths_agree():
            self._compiled = self._backend = None

    # -- rendering ------------------------------------------------------------------------------
    def template_messages(
        self, messages: list[Message], tools: list[ToolSpec]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        if self.native:
            return [self._native(m) for m in messages], [t.to_openai() for t in tools] or None
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "tool":
                block = f"<tool_response>\n{m.content}\n</tool_response>"
                if out and out[-1].get("_tool"):
                    out[-1]["content"] += "\n" + block
                else:
                    out.append({"role": "user", "content": block, "_tool": True})
            elif m.role == "assistant" and m.tool_calls:
                calls = self.parser.format_calls(m.tool_calls)
                out.append({"role": "assistant", "content": f"{m.content}\n{calls}" if m.content else calls})
            else:
                out.append({"role": m.role, "content": m.content})
        for d in out:
            d.pop("_tool", None)
        if tools:
            prompt = self._tools_prompt(tools)
            if out and out[0]["role"] == "system":
                out[0]["content"] = f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt
            else:
                out.insert(0, {"role": "system", "content": prompt})
        return out, None

    def _tools_prompt(self, tools: list[ToolSpec]) -> str:
        """The parser's tool instructions, memoized per tool list (scaffolds resend the same list)."""
        fp = tools_fingerprint(tools)
        prompt = self._prompts.get(fp)
        if prompt is None:
            if len(self._prompts) > 64:
                self._prompts.clear()
            prompt = self._prompts[fp] = self.parser.system_prompt(tools)
        return prompt

    @staticmethod
    def _native(m: Message) -> dict[str, Any]:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
        return d

    def render(self, messages: list[Message], tools: list[ToolSpec], add_generation_prompt: bool) -> str:
        if not messages:
            return ""
        msgs, tool_arg = self.template_messages(messages, tools)
        try:
            return self._render_dicts(msgs, tool_arg, add_generation_prompt)
        except Exception as exc:  # template-level refusals (e.g. "roles must alternate") are the caller's fault
            raise ProxyError(400, f"the chat template rejected the messages: {exc}") from exc

    def _render_dicts(self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        if self._compiled is not None:  # the template HF compiled, without apply_chat_template's overhead
            return self._compiled.render(
                messages=msgs, tools=tools, documents=None, add_generation_prompt=gen, **self._template_kwargs
            )
        return self.tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen)

    def _fast_paths_agree(self) -> bool:
        """The fast render/encode paths are used only if they reproduce HF's own on probe conversations."""
        probe = [Message("user", "Hi <b>there</b>\n  x"), Message("assistant", "ok", [ToolCall("c", "f", {"a": 1})]),
                 Message("tool", "42", tool_call_id="c"), Message("user", "and?")]
        tools = [ToolSpec("f", "probe", {"type": "object", "properties": {"a": {"type": "integer"}}})]
        try:
            for msgs, tl in ((probe[:1], []), (probe, tools), ([Message("system", "s"), *probe], tools)):
                dicts, tool_arg = self.template_messages(msgs, tl)
                for gen in (True, False):
                    slow = self.tok.apply_chat_template(dicts, tools=tool_arg, tokenize=False, add_generation_prompt=gen)
                    if self._compiled is not None and self._render_dicts(dicts, tool_arg, gen) != slow:
                        return False
                    if self._backend is not None and self.encode(slow) != encode_text(self.tok, slow):
                        return False
        except Exception:
            return False
        return True

    # -- tokens ---------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        if self._backend is not None:
            if len(text) > LARGE_TEXT:  # `encode_batch` releases the GIL (`encode` holds it for seconds)
                return self._backend.encode_batch([text], add_special_tokens=False)[0].ids
            return self._backend.encode(text, add_special_tokens=False).ids
        return encode_text(self.tok, text)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def starts_special(self, text: str) -> bool:
        return any(text.startswith(s) for s in self.special_texts)

    def ends_special(self, text: str) -> bool:
        return any(text.endswith(s) for s in self.special_texts)

    def join_exact(self, left_ids: list[int], new_text: str) -> bool:
        """Would tokenizing `new_text` after `left_ids` separately equal a one-shot tokenization?

        Exact by construction next to a special token; otherwise re-tokenize the text since the last
        special token in `left_ids` together with `new_text` and compare.
        """
        if not left_ids or not new_text or left_ids[-1] in self.special_ids or self.starts_special(new_text):
            return True
        j = len(left_ids)
        while j > 0 and left_ids[j - 1] not in self.special_ids and len(left_ids) - j < 256:
            j -= 1
        tail = left_ids[j:]
        return self.encode(self.decode(tail) + new_text) == tail + self.encode(new_text)


def _compiled_template(tokenizer: Any) -> Any:
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str):
        return None
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(template)
    except Exception:  # a transformers without it: apply_chat_template is the fallback
        return None
