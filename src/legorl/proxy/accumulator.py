"""Per-branch token accumulator: the only source of rollout tokens.

Holds exactly the ids the engine was fed and sampled, with mask / logprob / weight version / MoE
routing per token, the conversation those tokens encode, and checkpoints mapping a message count to
the token offset where that prefix of the conversation ends (used to fork on a history rewrite).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from legorl.proxy.messages import Message, ToolSpec
from legorl.proxy.record import BranchKind, BranchRecord, Segment


@dataclass
class Branch:
    index: int
    kind: BranchKind
    anchor: tuple
    tools: list[ToolSpec]
    tools_fp: str
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    routing: dict[int, np.ndarray] = field(default_factory=dict)  # position -> [layers, top_k]
    messages: list[Message] = field(default_factory=list)
    checkpoints: dict[int, int] = field(default_factory=lambda: {0: 0})
    last_prompt_text: str = ""  # render(messages[:-1], generation prompt) of the latest call
    base_text: str | None = None  # render(messages) without generation prompt, precomputed off the hot path
    reply_stop_id: int | None = None  # stop token the latest reply ended with (None: length / stop string)
    recomputed: list[tuple[int, int]] = field(default_factory=list)
    superseded: list[Segment] = field(default_factory=list)
    calls: int = 0

    def truncate(self, fork: int) -> int:
        """Cut the branch back to `fork` tokens; policy tokens cut off are kept in `superseded`."""
        dropped = len(self.ids) - fork
        if dropped <= 0:
            return 0
        if any(self.mask[fork:]):
            self.superseded.append(
                Segment(fork, self.ids[fork:], self.mask[fork:], self.logprobs[fork:], self.versions[fork:])
            )
        del self.ids[fork:], self.mask[fork:], self.logprobs[fork:], self.versions[fork:]
        self.routing = {p: r for p, r in self.routing.items() if p < fork}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if v <= fork}
        self.recomputed = [(a, min(b, fork)) for a, b in self.recomputed if a < fork]
        return dropped

    def append(self, ids: list[int], mask: int, logprobs: list[float | None], version: int) -> None:
        self.ids.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs)
        self.versions.extend(version if lp is not None else -1 for lp in logprobs)

    def add_routing(self, start: int, rows: np.ndarray | None) -> None:
        """Routing rows for positions start.. ; the first routing seen for a position wins (it is the
        one that produced the sampled token there)."""
        if rows is None:
            return
        for i in range(len(rows)):
            self.routing.setdefault(start + i, rows[i])

    def routed_array(self) -> np.ndarray | None:
        if not self.routing:
            return None
        sample = next(iter(self.routing.values()))
        out = np.full((len(self.ids), *sample.shape), -1, dtype=np.int32)
        for p, r in self.routing.items():
            if p < len(self.ids):
                out[p] = r
        return out

    def to_record(self) -> BranchRecord:
        return BranchRecord(
            index=self.index,
            kind=self.kind,
            token_ids=list(self.ids),
            mask=list(self.mask),
            logprobs=list(self.logprobs),
            weight_versions=list(self.versions),
            routed_experts=self.routed_array(),
            messages=[m.to_dict() for m in self.messages],
            tools=[t.to_openai() for t in self.tools],
            recomputed_spans=list(self.recomputed),
            superseded=list(self.superseded),
            calls=self.calls,
        )
