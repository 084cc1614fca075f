"""Global load balancer: which replica serves a call.

`sticky` (default): every call of a session goes to the replica that served its first call, so the
session's growing prompt keeps hitting that replica's prefix cache. A new session goes to the
least-loaded healthy replica: fewest requests in flight, then fewest pinned sessions (so sessions
that arrive one at a time still spread evenly), then the stable insertion order. When a pinned
replica dies or is removed, the session is re-pinned on its next call (that call re-prefills: it is
counted). The pin table is an LRU bounded by `max_sessions`; `end_session` drops a pin at once.

A new session whose first prompt equals a recent session's (the trials of one GRPO group start from the same
prompt) follows that session to its replica while that replica has at most `affinity_slack` more calls in flight
than the least loaded one: the group's prompt is prefilled once, not once per replica (the cache-aware routing of
SGLang's router, reduced to whole first prompts). Affinity is a bounded LRU of prompt hashes; 0 turns it off.

`round_robin` ignores sessions and cycles over healthy replicas per call: the baseline the
benchmark compares against.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal

from legorl.serving.pool import NoHealthyReplicaError, Replica, ReplicaPool

Policy = Literal["sticky", "round_robin"]
RouteKind = Literal["sticky", "new", "repin", "round_robin", "anonymous"]


class LoadBalancer:
    def __init__(self, pool: ReplicaPool, policy: Policy = "sticky", max_sessions: int = 100_000,
                 affinity_slack: int = 4):
        if policy not in ("sticky", "round_robin"):
            raise ValueError(f"unknown balancer policy {policy!r}")
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.pool = pool
        self.policy: Policy = policy
        self.max_sessions = max_sessions
        self._pins: OrderedDict[str, str] = OrderedDict()  # session id -> replica id (LRU order)
        self._pinned_count: dict[str, int] = {}
        self._rr = 0
        self.affinity_slack = affinity_slack
        self._affinity: OrderedDict[bytes, str] = OrderedDict()  # first-prompt hash -> replica id (LRU order)
        self.counters = dict.fromkeys(
            ["new_sessions", "sticky_hits", "repins", "evicted_pins", "ended", "affinity_hits"], 0)
        pool.subscribe(self._on_pool_event)

    # -- routing ----------------------------------------------------------------------------------
    def peek(self, session_id: str | None) -> Replica:
        """The replica `pick` would choose now, without pinning or counting anything."""
        healthy = self._healthy()
        if self.policy == "round_robin" or session_id is None:
            return self._least_loaded(healthy) if self.policy == "sticky" else self._next_rr(healthy, peek=True)
        rep = self._pinned(session_id)
        return rep if rep is not None else self._least_loaded(healthy)

    def pick(self, session_id: str | None, prefer: str | None = None) -> Replica:
        """Choose (and pin) the replica for one call; see `route`."""
        return self.route(session_id, prefer)[0]

    def route(self, session_id: str | None, prefer: str | None = None,
              prompt: Sequence[int] | None = None) -> tuple[Replica, RouteKind]:
        """The replica for one call and why. `prefer` is a replica the scheduler already probed
        for this session; it is honoured when healthy and the session is not pinned elsewhere. `prompt` (the
        call's token ids) lets a new session follow an earlier one with the same first prompt."""
        healthy = self._healthy()
        if self.policy == "round_robin":
            return self._next_rr(healthy), "round_robin"
        if session_id is None:
            return self._least_loaded(healthy), "anonymous"
        rep = self._pinned(session_id)
        if rep is not None:
            self._pins.move_to_end(session_id)
            self.counters["sticky_hits"] += 1
            return rep, "sticky"
        kind: RouteKind = "new"
        if session_id in self._pins:  # pinned to a replica that is gone: this call re-prefills
            self._unpin(session_id)
            self.counters["repins"] += 1
            kind = "repin"
        else:
            self.counters["new_sessions"] += 1
        chosen = self.pool.get(prefer) if prefer else None
        key = _prompt_key(prompt) if prompt and self.affinity_slack > 0 else None
        if chosen is None or not chosen.healthy:
            chosen = self._least_loaded(healthy)
            if key is not None:
                chosen = self._affine(key, chosen)
        if key is not None:
            self._affinity[key] = chosen.id
            self._affinity.move_to_end(key)
            while len(self._affinity) > self.max_sessions:
                self._affinity.popitem(last=False)
        self._pin(session_id, chosen.id)
        return chosen, kind

    def replica_of(self, session_id: str) -> str | None:
        return self._pins.get(session_id)

    def end_session(self, session_id: str) -> None:
        if session_id in self._pins:
            self._unpin(session_id)
            self.counters["ended"] += 1

    # -- internals --------------------------------------------------------------------------------
    def _healthy(self) -> list[Replica]:
        healthy = self.pool.healthy()
        if not healthy:
            raise NoHealthyReplicaError("no healthy replica in the pool")
        return healthy

    def _pinned(self, session_id: str) -> Replica | None:
        rid = self._pins.get(session_id)
        rep = self.pool.get(rid) if rid is not None else None
        return rep if rep is not None and rep.healthy else None

    def _least_loaded(self, healthy: list[Replica]) -> Replica:
        return min(healthy, key=lambda r: (r.in_flight, self._pinned_count.get(r.id, 0), r.order))

    def _affine(self, key: bytes, least: Replica) -> Replica:
        """The replica of the last session with this first prompt, unless it is `affinity_slack` calls busier
        than the least loaded one (or gone)."""
        rid = self._affinity.get(key)
        rep = self.pool.get(rid) if rid is not None else None
        if rep is None or not rep.healthy or rep is least or rep.in_flight > least.in_flight + self.affinity_slack:
            return least
        self.counters["affinity_hits"] += 1
        return rep

    def _next_rr(self, healthy: list[Replica], peek: bool = False) -> Replica:
        ordered = sorted(healthy, key=lambda r: r.order)
        n = self._rr
        if not peek:
            self._rr += 1
        return ordered[n % len(ordered)]

    def _pin(self, session_id: str, replica_id: str) -> None:
        self._pins[session_id] = replica_id
        self._pinned_count[replica_id] = self._pinned_count.get(replica_id, 0) + 1
        while len(self._pins) > self.max_sessions:
            old = next(iter(self._pins))
            self._unpin(old)
            self.counters["evicted_pins"] += 1

    def _unpin(self, session_id: str) -> None:
        rid = self._pins.pop(session_id)
        left = self._pinned_count.get(rid, 0) - 1
        if left > 0:
            self._pinned_count[rid] = left
        else:
            self._pinned_count.pop(rid, None)

    def _on_pool_event(self, event: str, rep: Replica) -> None:
        # pins stay in place (lazy re-pin, so each re-prefill is counted at the call that pays it);
        # a dead replica stops counting towards the least-loaded tie-break
        if event in ("dead", "removed"):
            self._pinned_count.pop(rep.id, None)
        elif event == "revived":
            self._pinned_count[rep.id] = sum(1 for rid in self._pins.values() if rid == rep.id)

    def metrics(self) -> dict[str, float]:
        out = {f"balancer/{k}": float(v) for k, v in self.counters.items()}
        out["balancer/pinned_sessions"] = float(len(self._pins))
        return out


def _prompt_key(prompt: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", prompt).tobytes(), digest_size=16).digest()
