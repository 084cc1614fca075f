"""SessionRecord -> TrialTokens: the proxy's main-branch tokens as they are, never re-tokenized.

Context tokens (mask 0) get logprob 0.0 and weight version -1, whatever the proxy holds for them
(None, or a prompt_logprobs recompute after a history rewrite). A policy token (mask 1) without a
behaviour logprob is a capture bug: the trial is refused rather than trained on a made-up 0.0.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from legorl.proxy.record import SessionRecord
from legorl.trial import TrialTokens


class TokensError(ValueError):
    """The session's tokens cannot be trained on (the reason says why)."""


def trial_tokens(record: SessionRecord | None) -> TrialTokens | None:
    """The tokens of one trial (None when no token was ever generated); raises TokensError."""
    if record is None or not record.token_ids:
        return None
    ids, mask, lps = record.token_ids, record.mask, record.logprobs
    versions = record.weight_versions or [-1] * len(ids)
    if not len(ids) == len(mask) == len(lps) == len(versions):
        raise TokensError(
            f"session record arrays differ in length: ids {len(ids)}, mask {len(mask)}, "
            f"logprobs {len(lps)}, versions {len(versions)}"
        )
    missing = [i for i, (m, lp) in enumerate(zip(mask, lps, strict=True)) if m and lp is None]
    if missing:
        raise TokensError(
            f"{len(missing)} policy token(s) have no behaviour logprob (first at position {missing[0]})"
        )
    routed = record.routed_experts
    if routed is not None:
        routed = routed[: len(ids) - 1]  # row p = routing at position p; the last position never routes
    main = record.main
    meta: dict[str, Any] = {
        "session_id": record.session_id,
        "counters": asdict(record.counters),
        "branches": len(record.branches),
        "sub_branch_policy_tokens": sum(b.num_policy_tokens for b in record.branches[1:]),
        "recomputed_spans": list(main.recomputed_spans) if main else [],
    }
    return TrialTokens(
        token_ids=list(ids),
        response_mask=[int(m) for m in mask],
        logprobs=[float(lp) if m and lp is not None else 0.0 for m, lp in zip(mask, lps, strict=True)],
        weight_versions=[int(v) if m else -1 for m, v in zip(mask, versions, strict=True)],
        routed_experts=routed,
        capture=meta,
    )
