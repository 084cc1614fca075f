"""Token sampling with per-request seeds, and the logprob the trainer will recompute.

The reported logprob of a sampled token is log_softmax(logits / T) over the full vocabulary
(T = 1 when greedy), i.e. before top-k / top-p truncation: that is exactly what a trainer
recomputes from the same logits, so rollout and training agree.
"""

from __future__ import annotations

import torch

from legorl.serving.types import SamplingParams


def _filter(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k / nucleus top-p with -inf (1-D tensor)."""
    if 0 < top_k < scaled.numel():
        kth = torch.topk(scaled, top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # drop tokens once the mass *before* them already reaches top_p (always keep the first)
        drop = (cum - torch.softmax(sorted_logits, dim=-1)) >= top_p
        scaled = scaled.clone()
        scaled[order[drop]] = float("-inf")
    return scaled


def sample_rows(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> tuple[list[int], list[float]]:
    """Sample one token per row of `logits` [B, V] (fp32). Returns (token ids, logprobs)."""
    logits = logits.float()
    tokens: list[int] = []
    logprobs: list[float] = []
    for row, p, gen in zip(logits, params, generators, strict=True):
        if p.temperature == 0:
            tok = int(torch.argmax(row))
            lp = torch.log_softmax(row, dim=-1)[tok]
        else:
            scaled = row / p.temperature
            lps = torch.log_softmax(scaled, dim=-1)
            filtered = _filter(scaled, p.top_k, p.top_p)
            probs = torch.softmax(filtered, dim=-1)
            tok = int(torch.multinomial(probs, 1, generator=gen))
            lp = lps[tok]
        tokens.append(tok)
        logprobs.append(float(lp))
    return tokens, logprobs
