"""Test helpers: teacher-forced logprobs and a scripted policy."""

from __future__ import annotations

from legorl.models.chat import encode_text
from legorl.serving.types import GenerateRequest, TokenOutput


def teacher_forced(hf_model, ids: list[int], temperature: float = 1.0) -> list[float | None]:
    """log p(ids[i] | ids[:i]) from a plain HF forward (index 0: None)."""
    import torch

    with torch.no_grad():
        logits = hf_model(torch.tensor([ids])).logits[0].float()
    lps = torch.log_softmax(logits[:-1] / temperature, dim=-1)
    picked = lps.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return [None, *picked.tolist()]


class ScriptedManager:
    """TEST DOUBLE (allowed because a random tiny model cannot emit a specific tool call): a
    ServerManager whose `generate` answers with the next scripted text, tokenized canonically and
    closed with the end-of-turn token (or cut by length when `eos_id` is None), while the logprobs it reports are the real engine's
    `prompt_logprobs` of exactly those tokens under the tiny model. A `None` entry is a real sampled
    turn (the engine's own tokens and sampling logprobs). Everything else is delegated to the real
    manager, so fidelity checks against a teacher-forced HF forward stay meaningful."""

    def __init__(self, real, tokenizer, script: list[str | None], eos_id: int | None):
        self.real, self.tok, self.script, self.eos = real, tokenizer, list(script), eos_id
        self.requests: list[GenerateRequest] = []

    @property
    def weight_version(self) -> int:
        return self.real.weight_version

    @property
    def max_model_len(self) -> int:
        return self.real.max_model_len

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self.requests.append(request)
        text = self.script.pop(0)
        if text is None:
            return await self.real.generate(request)
        ids = encode_text(self.tok, text) + ([self.eos] if self.eos is not None else [])
        for t in ids if request.on_tokens is not None else ():  # streamed one token at a time, as an engine does
            request.on_tokens([t])
        temp = request.sampling.temperature or 1.0
        lps = await self.real.prompt_logprobs(request.prompt_ids + ids, request.session_id, temp)
        finish = "stop" if self.eos is not None else "length"
        return TokenOutput(request.request_id, len(request.prompt_ids), ids, lps[len(request.prompt_ids):], finish,
                           self.real.weight_version)

    async def prompt_logprobs(self, token_ids, session_id=None, temperature=1.0):
        return await self.real.prompt_logprobs(token_ids, session_id, temperature)

    async def abort(self, request_id):
        return await self.real.abort(request_id)

    def end_session(self, session_id):
        self.real.end_session(session_id)
