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


def _temperature(p: SamplingParams) -> float:
    t = float(p.temperature)
    return 0.0 if not t > 0 or math.isnan(t) else min(t, MAX_TEMPERATURE)


def _filter_rows(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k / nucleus top-p with -inf, rows [G, V] that share the knobs; the best token
    of a row is always kept."""
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop tokens once the mass *before* them already reaches top_p (always keep the first)
        drop = (probs.cumsum(-1) - probs) >= max(top_p, MIN_TOP_P)
        drop[:, 0] = False
        scaled = scaled.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return scaled


def _prepare(rows: torch.Tensor, p: SamplingParams) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows [G, V] with the same knobs, one batched pass: (logprobs, sampling CDF or None when greedy)."""
    temp = _temperature(p)
    if temp <= 0:
        return torch.log_softmax(rows, dim=-1), None
    scaled = rows / temp
    return torch.log_softmax(scaled, dim=-1), torch.softmax(_filter_rows(scaled, p.top_k, p.top_p), dim=-1).cumsum(-1)


def _draw(lps: torch.Tensor, cdf: torch.Tensor | None, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw per row from its own uniform: the first index whose cumulative mass exceeds
    u * total (never a zero-probability token); a degenerate row takes the mode."""
    if cdf is None:
        return torch.argmax(lps, dim=-1)
    total = cdf[:, -1]
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    toks = torch.searchsorted(cdf, x[:, None], right=True)[:, 0].clamp_(max=cdf.shape[-1] - 1)
    ok = torch.isfinite(total) & (total > 0) & torch.isfinite(cdf).all(-1)
    return toks if bool(ok.all()) else torch.where(ok, toks, torch.argmax(lps, dim=-1))


def sample_rows(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> tuple[list[int], list[float]]:
    """Sample one token per row of `logits` [B, V], rows with the same knobs together. Returns (token ids,
    logprobs). Each row's draw is one uniform from its own generator, taken only once every group's
    distribution is built: a seed fixes a row's sample whatever else is in the batch, even a row that fails."""
    logits = logits.float()
    groups: dict[tuple[float, int, float], list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault((_temperature(p), p.top_k, p.top_p), []).append(i)
    prepared = [(idx, *_prepare(logits[idx] if len(idx) < len(params) else logits, params[idx[0]]))
                for idx in groups.values()]
    tokens: list[int] = [0] * len(params)
    logprobs: list[float] = [0.0] * len(params)
    for idx, lps, cdf in prepared:
        u = torch.cat([torch.rand(1, generator=generators[i]) for i in idx]) if cdf is not None else None
        toks = _draw(lps, cdf, u)
        for i, t, lp in zip(idx, toks.tolist(), lps.gather(1, toks[:, None])[:, 0].tolist(), strict=True):
            tokens[i], logprobs[i] = t, lp
    return tokens, logprobs
