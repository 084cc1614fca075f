"""Where a step's seconds went (`budget/*` metrics): the engines' prefill and decode time and rates, the
share of the rollout phase they were busy, each trial phase (sandbox start, agent, verifier, stop), and
the event loop's lag. With `timing/*` (rollout, old logprobs, update, weight sync) this accounts for a
step; the dashboard charts both."""

from __future__ import annotations

import statistics

from legorl.serving.types import EngineStats
from legorl.trial import TrialResult

TRIAL_PHASES = ("sandbox_start", "agent", "session_close", "verify", "sandbox_stop")


def engine_budget(before: list[EngineStats], after: list[EngineStats], wall_s: float) -> dict[str, float]:
    """Engine work between two snapshots, all replicas together (busy share per replica on average)."""
    if not before or len(before) != len(after):
        return {}

    def delta(field: str) -> float:
        return float(sum(getattr(a, field) - getattr(b, field) for a, b in zip(after, before, strict=True)))

    prefill_s, decode_s = delta("prefill_s"), delta("decode_s")
    prefill, cached, decoded = (delta(f) for f in ("prefill_tokens_computed", "prefill_tokens_cached",
                                                   "generated_tokens"))
    out = {"budget/engine/prefill_tokens": prefill, "budget/engine/cached_prompt_tokens": cached,
           "budget/engine/decode_tokens": decoded, "budget/engine/prefill_s": prefill_s,
           "budget/engine/decode_s": decode_s,
           # calls evicted from a full KV pool: each recomputes its context later (in prefill_tokens)
           "budget/engine/preemptions": delta("preemptions")}
    if prefill_s > 0:
        out["budget/engine/prefill_tok_s"] = prefill / prefill_s
    if decode_s > 0:
        out["budget/engine/decode_tok_s"] = decoded / decode_s
    steps = delta("steps")
    if steps > 0:  # rows sampled per forward step: low means few trials are in the engine at once
        out["budget/engine/rows_per_step"] = decoded / steps
    if wall_s > 0 and (prefill_s or decode_s):
        out["budget/engine/busy_share"] = (prefill_s + decode_s) / (wall_s * len(after))
    return out


def trial_budget(results: list[TrialResult]) -> dict[str, float]:
    """Per trial phase: the median and the largest seconds over the step's trials."""
    out: dict[str, float] = {}
    for phase in TRIAL_PHASES:
        values = [r.timings[phase] for r in results if phase in r.timings]
        if values:
            out[f"budget/trial/{phase}_p50_s"] = statistics.median(values)
            out[f"budget/trial/{phase}_max_s"] = max(values)
    return out


def loop_budget(lag: dict[str, float]) -> dict[str, float]:
    return {f"budget/loop_lag/{k}": v for k, v in lag.items() if k != "samples"}
