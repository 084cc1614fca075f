"""Tokenizer and chat-template helpers shared by the engine, proxy, scaffolds and trainer."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

# End-of-turn markers used by common chat templates; whichever exist in the vocab become stop ids.
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")


@lru_cache(maxsize=8)
def load_tokenizer(model_dir: str | Path):
    """Load (and memoize) the tokenizer of a local HF model directory."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if tok.chat_template is None:
        raise ValueError(f"{model_dir}: the tokenizer has no chat template; legorl needs a chat/instruct model")
    return tok


def render_chat(
    tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Render messages (+ tools) with the model's own chat template, as text."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt
    )


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of already-rendered template text (no extra BOS/EOS: the template owns those)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def chat_ids(
    tokenizer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    return encode_text(tokenizer, render_chat(tokenizer, messages, tools, add_generation_prompt))


def stop_token_ids(tokenizer) -> list[int]:
    """Ids that end an assistant turn: the EOS token plus the template's end-of-turn markers."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for tok in _END_OF_TURN_TOKENS:
        if tok in vocab and tok in (tokenizer.chat_template or "") and vocab[tok] not in ids:
            ids.append(int(vocab[tok]))
    return ids


def supports_tools(tokenizer) -> bool:
    """Whether the chat template renders a `tools` argument (else scaffolds use a text protocol)."""
    return "tools" in (tokenizer.chat_template or "")
