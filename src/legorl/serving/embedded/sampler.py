"""Token sampling with per-request seeds, and the logprob the trainer will recompute.

The reported logprob of a sampled token is log_softmax(logits / T) over the full vocabulary
(T = 1 when greedy), i.e. before top-k / top-p truncation: that is exactly what a trainer
recomputes from the same logits, so rollout and training agree.

Robust per row: extreme but valid knobs (top_p = 1e-300, which float32 rounds to 0; temperature =
1e308, which float32 rounds to inf) never produce a NaN distribution. The most likely token always
survives the filters, and a row whose distribution still is not a finite, positive measure is
sampled greedily, so one request's values cannot fail a batch it shares with others.
"""

from __future__ import annotations

import math

import torch

from legorl.serving.types import MAX_TEMPERATURE, MIN_TOP_P, SamplingParams


def _filter(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k / nucleus top-p with -inf (1-D tensor); the best token is always kept."""
    if 0 < top_k < scaled.numel():
        kth = torch.topk(scaled, top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop tokens once the mass *before* them already reaches top_p (always keep the first)
        drop = (probs.cumsum(-1) - probs) >= max(top_p, MIN_TOP_P)
        drop[0] = False
        scaled = scaled.clone()
        scaled[order[drop]] = float("-inf")
    return scaled


def _temperature(p: SamplingParams) -> float:
    t = float(p.temperature)
    return 0.0 if not t > 0 or math.isnan(t) else min(t, MAX_TEMPERATURE)


def sample_row(row: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> tuple[int, float]:
    """One token of one row [V] (fp32): (token id, logprob)."""
    temp = _temperature(p)
    if temp > 0:
        scaled = row / temp
        lps = torch.log_softmax(scaled, dim=-1)
        probs = torch.softmax(_filter(scaled, p.top_k, p.top_p), dim=-1)
        total = float(probs.sum())
        if math.isfinite(total) and total > 0 and bool(torch.isfinite(probs).all()):
            tok = int(torch.multinomial(probs, 1, generator=gen))
            return tok, float(lps[tok])
        tok = int(torch.argmax(lps))  # degenerate distribution: the mode, under the same temperature
        return tok, float(lps[tok])
    tok = int(torch.argmax(row))
    return tok, float(torch.log_softmax(row, dim=-1)[tok])


def sample_rows(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> tuple[list[int], list[float]]:
    """Sample one token per row of `logits` [B, V]. Returns (token ids, logprobs)."""
    logits = logits.float()
    tokens: list[int] = []
    logprobs: list[float] = []
    for row, p, gen in zip(logits, params, generators, strict=True):
        tok, lp = sample_row(row, p, gen)
        tokens.append(tok)
        logprobs.append(lp)
    return tokens, logprobs
