"""The Rollout-ready output of a session: typed, JSON-serializable, written as proxy_trajectory.json."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

BranchKind = Literal["main", "sub"]


@dataclass
class Counters:
    """Per-session counts a worker uses to classify and filter the trial."""

    calls: int = 0
    extensions: int = 0  # calls whose history extended a branch exactly
    rewrites: int = 0  # calls whose history diverged from a branch (scaffold rewrote history)
    retries: int = 0  # rewrites whose history is a prefix of the branch's (the same question again)
    template_drift: int = 0  # extensions where the template re-rendered the previous reply differently
    new_branches: int = 0  # sub-sessions (plus the first call's main branch)
    dropped_tokens: int = 0  # accumulator tokens replaced by a rewrite (kept in `superseded`)
    recomputed_tokens: int = 0  # rewritten tokens scored with prompt_logprobs
    boundary_mismatches: int = 0  # separate tokenization at a boundary != one-shot tokenization
    context_overflows: int = 0
    tool_calls: int = 0
    tool_parse_failures: int = 0
    length_capped: int = 0  # calls the engine stopped at max_tokens, not at an end of turn or a stop string
    errors: int = 0  # 4xx/5xx answers on this session
    aborted: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    streamed_calls: int = 0  # calls answered as a stream whose first event went out
    first_event_ms: int = 0  # summed over them: call start to the first streamed event (time to first token)
    temperature_pinned: int = 0  # calls that asked for another temperature than the session's pinned one


@dataclass
class Segment:
    """Tokens a rewrite removed from a branch: they started at `start` in that branch."""

    start: int
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float | None]
    weight_versions: list[int]


@dataclass
class BranchRecord:
    """One conversation inside a session (main agent, or a sub-agent / side call).

    `mask[i]` is 1 for tokens the policy sampled (incl. the end-of-turn token it emitted);
    `logprobs[i]` is the behaviour logprob for those, a `prompt_logprobs` recompute for rewritten
    tokens, and None for context tokens never scored; `weight_versions[i]` is the version that
    produced `logprobs[i]` (-1 where it is None). `routed_experts` (MoE): [len, layers, top_k],
    rows never routed are -1.
    """

    index: int
    kind: BranchKind
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float | None]
    weight_versions: list[int]
    routed_experts: np.ndarray | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    recomputed_spans: list[tuple[int, int]] = field(default_factory=list)
    superseded: list[Segment] = field(default_factory=list)
    calls: int = 0

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.mask)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["routed_experts"] = None if self.routed_experts is None else self.routed_experts.tolist()
        return d


@dataclass
class SessionRecord:
    """Everything the trainer needs from one session; top-level token fields are the main branch's."""

    session_id: str
    model: str
    branches: list[BranchRecord]
    counters: Counters
    context_overflow: bool = False
    opened_at: float = 0.0
    closed_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> BranchRecord | None:
        return self.branches[0] if self.branches else None

    @property
    def token_ids(self) -> list[int]:
        return self.main.token_ids if self.main else []

    @property
    def mask(self) -> list[int]:
        return self.main.mask if self.main else []

    @property
    def logprobs(self) -> list[float | None]:
        return self.main.logprobs if self.main else []

    @property
    def weight_versions(self) -> list[int]:
        return self.main.weight_versions if self.main else []

    @property
    def routed_experts(self) -> np.ndarray | None:
        return self.main.routed_experts if self.main else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.main.messages if self.main else []

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "model": self.model,
            "context_overflow": self.context_overflow,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "metadata": self.metadata,
            "counters": asdict(self.counters),
            "branches": [b.to_json() for b in self.branches],
        }

    def write(self, directory: str | Path) -> Path:
        """Write `<directory>/proxy_trajectory.json` (atomic rename) and return its path."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "proxy_trajectory.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(path)
        return path
