"""Reference numbers for engine tests: a plain HF forward over the same weights (teacher forcing)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from legorl.models.chat import chat_ids, load_tokenizer


def hf_model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def teacher_forced(model, ids: list[int], temperature: float = 1.0) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 under log_softmax(logits / T) (raw logits when T == 0)."""
    logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    if temperature > 0:
        logits = logits / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def prompt(path, text="Write a bash command that prints hello", n_words: int = 0) -> list[int]:
    tok = load_tokenizer(path)
    return chat_ids(tok, [{"role": "user", "content": text + " word" * n_words}])


def max_delta(model, out, ids, temperature) -> float:
    """Largest |engine logprob - teacher-forced logprob| over the generated tokens of `out`."""
    ref = teacher_forced(model, ids + out.token_ids, temperature)[len(ids) - 1 :]
    return max(abs(a - b) for a, b in zip(out.logprobs, ref, strict=True))


def started_server(**config):
    """A started vLLM server for a module-scoped fixture (`yield from started_server(...)`), stopped after the
    module (also when its last test killed it and the engine restarted it)."""
    import asyncio

    from legorl.serving.vllm import VLLMServer, VLLMServerConfig

    srv = VLLMServer(VLLMServerConfig(**config))
    asyncio.run(srv.start())
    yield srv
    asyncio.run(srv.stop())
