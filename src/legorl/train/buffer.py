"""RolloutBuffer: finished trials, released to the trainer only as complete groups.

A GRPO/RLOO group (the n attempts of one task) is trained together or not at all: its baseline is
the group's mean, so a half-finished group would bias every advantage in it. Trials land here as
they finish; a group becomes ready once all n have arrived, in completion order.

Staleness (async mode): a group's lag is `actor_version - v` where v is the oldest weight version
of any policy token in any of its rollouts. Groups whose lag exceeds `staleness_threshold` are
dropped whole when the trainer asks for a batch (and counted): dropping whole groups keeps the
survivors' baselines intact, and measuring at consumption is what bounds the off-policyness the
update really sees. `staleness_threshold=None` (sync mode) never drops. Within the bound, a batch takes
the ready groups with the oldest tokens first, so a group about to cross the bound is trained, not dropped.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from legorl.trial import TrialResult


@dataclass
class Group:
    group_id: str
    size: int
    results: list[TrialResult] = field(default_factory=list)
    done_at: float = 0.0

    @property
    def complete(self) -> bool:
        return len(self.results) >= self.size

    def oldest_version(self) -> int | None:
        vs = [v for r in self.results for v in r.policy_versions()]
        return min(vs) if vs else None


@dataclass
class BatchStats:
    """What one `get_batch` saw: lags of the groups it returned, and what it dropped as stale."""

    staleness: list[int] = field(default_factory=list)  # per returned rollout with policy tokens
    dropped_groups: int = 0
    dropped_rollouts: int = 0
    wait_s: float = 0.0

    def metrics(self) -> dict[str, float]:
        s = self.staleness
        return {
            "fully_async/staleness/mean": sum(s) / len(s) if s else 0.0,
            "fully_async/staleness/max": float(max(s)) if s else 0.0,
            "trajectory_filter/dropped_stale": float(self.dropped_rollouts),
            "fully_async/buffer/stale_groups": float(self.dropped_groups),
        }


def _oldest(group: Group) -> float:
    v = group.oldest_version()
    return float("inf") if v is None else float(v)


class RolloutBuffer:
    """See the module docstring. Single event loop; `add` from trial callbacks, `get_batch` from the trainer."""

    def __init__(self, staleness_threshold: int | None = None):
        self.staleness_threshold = staleness_threshold
        self._pending: dict[str, Group] = {}
        self._ready: list[Group] = []
        self._cond = asyncio.Condition()
        self.total_dropped_rollouts = 0

    def expect(self, group_id: str, size: int) -> None:
        """Announce a group of `size` trials (before its first trial can finish)."""
        self._pending[group_id] = Group(group_id, size)

    async def add(self, result: TrialResult) -> None:
        gid = result.group_id
        group = self._pending.get(gid)
        if group is None:  # never announced: a group of one
            group = self._pending[gid] = Group(gid, 1)
        group.results.append(result)
        if group.complete:
            del self._pending[gid]
            group.done_at = time.monotonic()
            async with self._cond:
                self._ready.append(group)
                self._cond.notify_all()

    async def abandon(self, group_id: str) -> None:
        """A group will never complete (its trials were cancelled): forget it."""
        self._pending.pop(group_id, None)

    @property
    def ready_groups(self) -> int:
        return len(self._ready)

    @property
    def pending_groups(self) -> int:
        return len(self._pending)

    def _lag(self, group: Group, actor_version: int) -> int | None:
        v = group.oldest_version()
        return None if v is None else actor_version - v

    def _evict_stale(self, actor_version: int, stats: BatchStats) -> None:
        if self.staleness_threshold is None:
            return
        keep = []
        for g in self._ready:
            lag = self._lag(g, actor_version)
            if lag is not None and lag > self.staleness_threshold:
                stats.dropped_groups += 1
                stats.dropped_rollouts += len(g.results)
            else:
                keep.append(g)
        self.total_dropped_rollouts += stats.dropped_rollouts
        self._ready = keep

    def _oldest_first(self, n_groups: int) -> list[Group]:
        """Take the `n_groups` ready groups with the oldest tokens (completion order among equals): a group
        at the edge of the bound trains now instead of being dropped at the next step."""
        if self.staleness_threshold is None:  # sync: completion order
            order = list(range(len(self._ready)))
        else:
            order = sorted(range(len(self._ready)), key=lambda i: (_oldest(self._ready[i]), i))
        take = set(order[:n_groups])
        groups = [g for i, g in enumerate(self._ready) if i in take]
        self._ready = [g for i, g in enumerate(self._ready) if i not in take]
        return groups

    async def get_batch(self, n_groups: int, actor_version: int) -> tuple[list[TrialResult], BatchStats]:
        """Wait for `n_groups` complete groups within the staleness bound; their trials, oldest first."""
        stats = BatchStats()
        t0 = time.monotonic()
        async with self._cond:
            while True:
                self._evict_stale(actor_version, stats)
                if len(self._ready) >= n_groups:
                    break
                await self._cond.wait()
            groups = self._oldest_first(n_groups)
        stats.wait_s = time.monotonic() - t0
        results = [r for g in groups for r in g.results]
        for r in results:
            vs = r.policy_versions()
            if vs:
                stats.staleness.append(actor_version - min(vs))
        return results, stats

    def take_all(self) -> list[TrialResult]:
        """Everything complete, without waiting (sync mode: one step's batch)."""
        groups, self._ready = self._ready, []
        return [r for g in groups for r in g.results]
