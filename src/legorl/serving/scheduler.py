"""Session-level scheduler: an admission gate in front of the balancer (opt-in).

Why: an agent session alternates model calls with tool calls. Under KV pressure, admitting every
call lets new sessions evict the cached prefixes of sessions that are mid-trajectory, so every turn
re-prefills its whole history. The gate keeps the working set small instead: below the high
watermark everything is admitted; above it, only sessions that already own KV (a reservation, or a
prefix that is still resident on their replica) go ahead, and the rest wait for room.

Decision per `acquire(session_id, prompt_ids)`, in order (the reason is recorded per admission):

- the session owns a reservation (in flight, or in its idle grace window) that still fits the KV
  -> `reserved_session` (no probing at all);
- the KV-usage probe fails -> `kv_probe_unavailable`;
- KV usage of the target replica below `high_watermark` -> `open`;
- the prefix probe fails -> `prefix_probe_unavailable` (never a hang on a missing probe);
- resident prefix hit ratio >= `hit_threshold`, and the reservation fits -> `resident_prefix`;
- otherwise wait `wait_poll_sec` or until another lease is released, then decide again.

Ownership windows: an admission under pressure reserves the session for its in-flight request;
`release()` turns the reservation into an idle grace window of `idle_grace_sec`, so the session's
next turn (after its tool call) is admitted without probing. `finish_session()` or expiry ends it
(expired windows are purged lazily, waking waiters). A lease released by a failed or cancelled call
drops its reservation at once. "Under pressure" is an episode: once a replica was seen above the
watermark, admissions on it reserve for `idle_grace_sec` even when a dip admits them as `open`.

Claims (`count_pending`): the usage compared is max(engine usage, claimed / KV budget), claimed being
the prompt tokens of admitted leases (work the engine has not started: no wake-up herd) and of idle
reservations (the KV their next turn needs: newcomers must not evict it). A reservation is granted
only beside the other claims; a reserved session whose grown prompt no longer fits yields it and
competes like any other, so reserved sessions do not evict each other.

Attempt preemption: when a newer attempt of the same call arrives while an older one waits, the
older one is aborted at its next checkpoint (it is woken at once) with `AttemptPreempted`, counted
in the session's `num_preempted`. Same call = same explicit `attempt_key`, or, without keys, a new
prompt of the same session that repeats at least `attempt_overlap` of the waiting one (a retry
resends its history; a parallel sub-agent branch of the session differs early and keeps waiting).

Probes are `Engine.kv_cache_usage()` (every decision) and `Engine.prefix_cache_probe(ids)` (only
above the watermark); both are read-only lookups that never queue work or touch the LRU.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict

from legorl.serving.admission import (
    MIN_POLL_SEC,
    AdmissionAborted,
    AttemptPreempted,
    Lease,
    SchedulerConfig,
    SessionState,
    TargetFn,
    Waiter,
    common_prefix,
)
from legorl.serving.types import Engine

__all__ = ["MIN_POLL_SEC", "AdmissionAborted", "AttemptPreempted", "Lease", "SchedulerConfig", "SessionScheduler"]

class SessionScheduler:
    def __init__(self, target: TargetFn, config: SchedulerConfig | None = None):
        self.target = target
        self.config = config or SchedulerConfig()
        if not 0 < self.config.high_watermark <= 1 or not 0 <= self.config.hit_threshold <= 1:
            raise ValueError("high_watermark must be in (0, 1] and hit_threshold in [0, 1]")
        if self.config.wait_poll_sec <= 0:
            raise ValueError("wait_poll_sec must be > 0")
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._idle: OrderedDict[str, float] = OrderedDict()  # idle reservations in expiry order
        self._waiters: list[Waiter] = []
        self._changed = asyncio.Event()
        self._pending: dict[str, int] = {}  # replica id -> prompt tokens of active leases
        self._budget: dict[str, int | None] = {}
        self._pressure_until: dict[str, float] = {}  # replica id -> end of its pressure episode
        self.admissions: dict[str, int] = {}
        self.counters = dict.fromkeys(
            ["waited", "preempted", "aborted_waits", "expired_reservations", "yielded_reservations",
             "queue_len_max"], 0
        )
        self.wait_total_s = 0.0
        self.wait_max_s = 0.0

    # -- public API -------------------------------------------------------------------------------
    async def acquire(
        self, session_id: str, prompt_ids: list[int], *, attempt_key: str | None = None,
        request_id: str | None = None, adapter: str | None = None,
    ) -> Lease:
        """`adapter`: the named LoRA adapter the call runs with (its prefix cache is probed, not the base's)."""
        st = self._session(session_id)
        key = attempt_key or session_id
        attempt = st.attempts.get(key, 0) + 1
        st.attempts[key] = attempt
        if self.config.preempt_superseded:
            self._supersede(st, key, attempt, prompt_ids, attempt_key is not None)
        t0 = time.monotonic()
        me: Waiter | None = None
        try:
            while True:
                self._purge()
                if me is not None and me.aborted:
                    raise (AttemptPreempted if me.aborted == "preempted" else AdmissionAborted)(
                        f"session {session_id}: call {me.aborted} while waiting for admission"
                    )
                changed = self._changed
                decision = self._decide(st, prompt_ids, adapter)
                waited = time.monotonic() - t0
                if decision is None and self.config.max_wait_sec is not None and waited >= self.config.max_wait_sec:
                    decision = ("max_wait", None, False)
                if decision is not None:
                    return self._admit(st, decision, len(prompt_ids), waited if me else 0.0)
                if me is None:
                    me = Waiter(session_id, key, attempt, request_id, prompt_ids, attempt_key is not None)
                    self._waiters.append(me)
                    st.waiting += 1
                    self.counters["queue_len_max"] = max(self.counters["queue_len_max"], len(self._waiters))
                timeout = self.config.wait_poll_sec
                if self.config.max_wait_sec is not None:
                    timeout = max(min(timeout, self.config.max_wait_sec - waited), 0.0)
                try:
                    await asyncio.wait_for(changed.wait(), timeout)
                except TimeoutError:
                    pass
        finally:
            if me is not None:
                self._waiters.remove(me)
                st.waiting -= 1
                dt = time.monotonic() - t0
                self.counters["waited"] += 1
                self.wait_total_s += dt
                self.wait_max_s = max(self.wait_max_s, dt)
                if me.aborted:
                    self.counters["aborted_waits"] += 1

    def abort(self, request_id: str) -> bool:
        """Abort a call still waiting for admission; True if one was found."""
        for w in self._waiters:
            if w.request_id == request_id and not w.aborted:
                w.aborted = "aborted"
                self._wake()
                return True
        return False

    def finish_session(self, session_id: str) -> None:
        """The session is over: end its reservation, abort its waiting calls, forget its state."""
        st = self._sessions.get(session_id)
        if st is None:
            return
        for w in self._waiters:
            if w.session_id == session_id and not w.aborted:
                w.aborted = "session_finished"
        st.reserved, st.grace_until = False, None
        self._idle.pop(session_id, None)
        self._drop_claim(st)
        if st.active == 0 and st.waiting == 0:
            del self._sessions[session_id]
        self._wake()

    def session_info(self, session_id: str) -> dict[str, float]:
        st = self._sessions.get(session_id)
        if st is None:
            return {}
        return {"active": st.active, "reserved": float(self._owns(st)), "num_preempted": st.num_preempted,
                "waiting": st.waiting}

    def reserved(self, session_id: str) -> bool:
        self._purge()
        st = self._sessions.get(session_id)
        return st is not None and self._owns(st)

    @property
    def queue_len(self) -> int:
        return len(self._waiters)

    def metrics(self) -> dict[str, float]:
        self._purge()
        out = {f"sched/admit/{k}": float(v) for k, v in sorted(self.admissions.items())}
        out.update({f"sched/{k}": float(v) for k, v in self.counters.items()})
        n = self.counters["waited"]
        out["sched/num_preempted"] = float(self.counters["preempted"])
        out["sched/queue_len"] = float(len(self._waiters))
        out["sched/wait_time_total_s"] = self.wait_total_s
        out["sched/wait_time_mean_s"] = self.wait_total_s / n if n else 0.0
        out["sched/wait_time_max_s"] = self.wait_max_s
        out["sched/reservations"] = float(sum(self._owns(s) for s in self._sessions.values()))
        return out

    # -- decisions --------------------------------------------------------------------------------
    def _decide(self, st: SessionState, ids: list[int],
                adapter: str | None = None) -> tuple[str, str | None, bool] | None:
        """(reason, replica id, reserve?) or None to wait; see the module docstring."""
        try:
            rid, engine = self.target(st.id)
        except Exception:  # no routable replica: let the call through and fail (or fail over) there
            rid, engine = None, None
        if self._owns(st):
            if rid is None or engine is None or self._fits(st, rid, engine, len(ids)):
                return ("reserved_session", rid, True)
            # the reserved working set outgrew the KV (contexts grow every turn): this session
            # yields its reservation and competes like any other, instead of evicting the others
            st.reserved, st.grace_until = False, None
            self._idle.pop(st.id, None)
            self._drop_claim(st)
            self.counters["yielded_reservations"] += 1
        if engine is None or rid is None:
            return ("probe_unavailable", None, False)
        try:
            usage = float(engine.kv_cache_usage())
        except Exception:
            usage = math.nan
        if math.isnan(usage):
            return ("kv_probe_unavailable", rid, False)
        claimed = self._pending_usage(rid, engine) if self.config.count_pending else 0.0
        now = time.monotonic()
        if max(usage, claimed) < self.config.high_watermark:
            # inside a pressure episode (the watermark was crossed within the grace window) an
            # admission joins the reserved working set too, so a dip does not let it be evicted
            return ("open", rid, self._pressure_until.get(rid, 0.0) > now)
        self._pressure_until[rid] = now + self.config.idle_grace_sec
        try:
            ratio = engine.prefix_cache_probe(ids, **({"adapter": adapter} if adapter is not None else {})).ratio
        except Exception:
            return ("prefix_probe_unavailable", rid, True)
        # a new reservation must fit beside the claims already made, or reserved sessions would
        # evict each other's prefixes during their tool calls
        if ratio >= self.config.hit_threshold and claimed + self._share(rid, len(ids)) <= 1.0:
            return ("resident_prefix", rid, True)
        return None

    def _admit(self, st: SessionState, decision: tuple[str, str | None, bool], tokens: int, waited: float) -> Lease:
        reason, rid, reserve = decision
        self.admissions[reason] = self.admissions.get(reason, 0) + 1
        if reserve:  # admitted under pressure: the session owns its KV until release + grace
            st.reserved = True
        st.grace_until = None
        self._idle.pop(st.id, None)
        self._drop_claim(st)
        st.active += 1
        if rid is not None:
            self._add_pending(rid, tokens)
        return Lease(self, st.id, reason, rid, tokens, waited)

    def _release(self, lease: Lease, failed: bool) -> None:
        if lease.replica_id is not None:
            self._add_pending(lease.replica_id, -lease.tokens)
        st = self._sessions.get(lease.session_id)
        if st is not None:
            st.active -= 1
            if st.active == 0 and st.reserved:
                if failed:  # a crashed or cancelled call must not leave its KV claim behind
                    st.reserved = False
                else:
                    st.grace_until = time.monotonic() + self.config.idle_grace_sec
                    self._idle[st.id] = st.grace_until
                    self._idle.move_to_end(st.id)
                    if lease.replica_id is not None:  # its KV stays claimed through the window
                        st.claim = (lease.replica_id, lease.tokens)
                        self._add_pending(lease.replica_id, lease.tokens)
        self._wake()

    def _supersede(self, st: SessionState, key: str, attempt: int, ids: list[int], explicit: bool) -> None:
        for w in self._waiters:
            if w.session_id != st.id or w.aborted:
                continue
            if explicit or w.explicit:
                same = w.key == key and w.attempt < attempt
            else:
                same = common_prefix(w.prompt, ids) >= self.config.attempt_overlap * len(w.prompt)
            if same:
                w.aborted = "preempted"
                st.num_preempted += 1
                self.counters["preempted"] += 1
        self._wake()

    # -- state ------------------------------------------------------------------------------------
    def _owns(self, st: SessionState) -> bool:
        if not st.reserved:
            return False
        return st.active > 0 or (st.grace_until is not None and st.grace_until > time.monotonic())

    def _purge(self) -> None:
        now, woke = time.monotonic(), False
        while self._idle:
            sid, until = next(iter(self._idle.items()))
            if until > now:
                break
            del self._idle[sid]
            st = self._sessions.get(sid)
            if st is not None and st.active == 0 and st.grace_until == until:
                st.reserved, st.grace_until = False, None
                self._drop_claim(st)
                self.counters["expired_reservations"] += 1
                woke = True
        if woke:
            self._wake()

    def _session(self, session_id: str) -> SessionState:
        st = self._sessions.get(session_id)
        if st is None:
            st = self._sessions[session_id] = SessionState(session_id)
            self._evict()
        else:
            self._sessions.move_to_end(session_id)
        return st

    def _evict(self) -> None:
        over = len(self._sessions) - self.config.max_sessions
        if over <= 0:
            return
        for sid in [sid for sid, st in self._sessions.items() if st.active == 0 and st.waiting == 0][:over]:
            self._drop_claim(self._sessions.pop(sid))
            self._idle.pop(sid, None)

    def _add_pending(self, rid: str, tokens: int) -> None:
        left = self._pending.get(rid, 0) + tokens
        if left > 0:
            self._pending[rid] = left
        else:
            self._pending.pop(rid, None)

    def _drop_claim(self, st: SessionState) -> None:
        if st.claim is not None:
            self._add_pending(st.claim[0], -st.claim[1])
            st.claim = None

    def _fits(self, st: SessionState, rid: str, engine: Engine, tokens: int) -> bool:
        """Whether an idle reserved session's next prompt fits beside the other claims."""
        if not self.config.count_pending or st.active > 0:
            return True
        own = st.claim[1] if st.claim is not None and st.claim[0] == rid else 0
        budget = self._budget_of(rid, engine)
        return not budget or (self._pending.get(rid, 0) - own + tokens) <= budget

    def _share(self, rid: str, tokens: int) -> float:
        budget = self._budget.get(rid)
        return tokens / budget if budget and self.config.count_pending else 0.0

    def _budget_of(self, rid: str, engine: Engine) -> int | None:
        if rid not in self._budget:
            try:
                self._budget[rid] = int(engine.stats().kv_budget_tokens) or None
            except Exception:
                self._budget[rid] = None
        return self._budget[rid]

    def _pending_usage(self, rid: str, engine: Engine) -> float:
        budget = self._budget_of(rid, engine)
        return self._pending.get(rid, 0) / budget if budget else 0.0

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
