"""Which requests compute which positions in the next step, under a token budget and the KV budget.

Like vLLM's scheduler with chunked prefill: every running request with one token pending decodes it
(allocating its next block first, preempting the youngest running request when the pool is full); the
rest of the step's token budget goes to prompts, first to running requests part-way through theirs, then
to waiting requests admitted in order (prefix-cached blocks reused, the others allocated for the whole
prompt up front). Several prompts, or chunks of one, share a step with the decode rows.

A waiting request whose next uncached block is one a running request is about to compute (the other
attempts of a GRPO group, sent together with one prompt) waits for it instead of computing the same
positions again: it is admitted once that block is cached, a step or two later.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from legorl.serving.embedded.batch import Work
from legorl.serving.embedded.blocks import BlockPool, chain_hashes
from legorl.serving.embedded.sequence import Sequence


class Scheduler:
    def __init__(self, pool: BlockPool, max_num_seqs: int, token_budget: int, enable_prefix_caching: bool):
        self.pool = pool
        self.block_size = pool.block_size
        self.max_num_seqs = max_num_seqs
        self.token_budget = max(token_budget, max_num_seqs + 1)
        self.enable_prefix_caching = enable_prefix_caching
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = dict.fromkeys(["prefill_computed", "prefill_cached", "preemptions", "prefill_deferred"], 0)

    def schedule(self, root_of: Callable[[Sequence], bytes], hold: Callable[[Sequence], bool]) -> list[Work]:
        """The next step's work. `root_of`: the prefix-cache root of a request (its weights: version and
        adapter). `hold`: a barrier or pause pending for this request, so it waits if it has not sampled a
        token yet (preempted requests, which have, still run)."""
        budget = self.token_budget

        def held(s: Sequence) -> bool:
            return s.num_generated == 0 and hold(s)

        work = []
        for s in list(self.running):
            if s in self.running and len(s.tokens) - s.num_computed == 1 and not held(s) and self._ensure_block(s):
                work.append(Work(s, s.num_computed, 1))
        work = [w for w in work if w.seq in self.running]  # a later row's allocation may preempt an earlier one
        budget -= len(work)
        for s in self.running:
            pending = len(s.tokens) - s.num_computed
            if pending > 1 and budget > 0 and not held(s):
                work.append(Work(s, s.num_computed, min(pending, budget)))
                budget -= work[-1].n
        # blocks the prompt chunks of this step are computing (their requests progress, so waiting on them
        # cannot stall: a held or unscheduled request is never waited on)
        coming = {h for w in work if w.n > 1 for h in self._uncomputed(w.seq)} if self.enable_prefix_caching else set()
        for head in list(self.waiting):  # in order; a held request lets preempted ones behind it pass
            if budget <= 0 or len(self.running) >= self.max_num_seqs:
                break
            if held(head) or self._waits_for(head, root_of(head), coming):
                continue
            if not self._admit(head, root_of(head)):
                break
            coming.update(self._uncomputed(head))
            work.append(Work(head, head.num_computed, min(len(head.tokens) - head.num_computed, budget)))
            budget -= work[-1].n
        return work

    def _uncomputed(self, seq: Sequence) -> list[bytes]:
        """Hashes of the full prompt blocks `seq` has yet to compute (known since its admission)."""
        return seq.prompt_hashes[seq.num_computed // self.block_size :]

    def _waits_for(self, seq: Sequence, root: bytes, coming: set[bytes]) -> bool:
        """True when the first block `seq` would compute is being computed by a running request."""
        if not coming:
            return False
        hashes = chain_hashes(seq.tokens, self.block_size, root, (len(seq.tokens) - 1) // self.block_size)
        n = len(self.pool.match(hashes))
        if n < len(hashes) and hashes[n] in coming:
            self.counters["prefill_deferred"] += 1
            return True
        return False

    def _admit(self, seq: Sequence, root: bytes) -> bool:
        pool, bs, tokens = self.pool, self.block_size, seq.tokens
        hashes = chain_hashes(tokens, bs, root)
        matched = pool.match(hashes[: (len(tokens) - 1) // bs]) if self.enable_prefix_caching else []
        for b in matched:
            pool.acquire(b)
        need = -(-len(tokens) // bs) - len(matched)
        if pool.available() < need:
            pool.release(matched)
            return False
        self.waiting.remove(seq)
        seq.blocks = matched + [pool.allocate() for _ in range(need)]  # type: ignore[misc]
        start = len(matched) * bs
        seq.hashes, seq.num_computed, seq.root = hashes[: len(matched)], start, root
        seq.prompt_hashes = hashes
        if seq.cached_prompt_tokens is None:
            seq.cached_prompt_tokens = start
            seq.t_start = time.perf_counter()
        self.counters["prefill_cached"] += start
        self.counters["prefill_computed"] += len(tokens) - start
        if start and pool.routing is not None:
            seq.add_routing(0, pool.routing[pool.slots(seq.blocks, 0, start)])
        self.running.append(seq)
        return True

    def fits_nothing(self) -> Sequence | None:
        """A waiting head that can never be admitted (nothing runs, so nothing will free blocks)."""
        if self.running or not self.waiting:
            return None
        head = self.waiting[0]
        return head if -(-len(head.tokens) // self.block_size) > self.pool.num_blocks else None

    def _ensure_block(self, seq: Sequence) -> bool:
        if seq.num_computed < len(seq.blocks) * self.block_size:
            return True
        while True:
            b = self.pool.allocate()
            if b is not None:
                seq.blocks.append(b)
                return True
            victim = max(self.running, key=lambda s: s.order)
            self.preempt(victim)
            if victim is seq:
                return False

    def preempt(self, seq: Sequence) -> None:
        """Back to the head of the queue, blocks released (full ones stay cached: recompute is cheap)."""
        self.running.remove(seq)
        self.pool.release(seq.blocks)
        seq.blocks, seq.hashes, seq.num_computed = [], [], 0
        self.waiting.appendleft(seq)
        self.counters["preemptions"] += 1

    def requeue_unstarted(self, which: Callable[[Sequence], bool] = lambda s: True) -> None:
        """Running requests (of `which`) that have not sampled yet go back to the queue (before a weight
        update: their KV would be the old weights'; before a pause: they hold no tokens worth keeping)."""
        for seq in reversed([s for s in self.running if s.num_generated == 0 and which(s)]):
            self.running.remove(seq)
            self.pool.release(seq.blocks)
            seq.blocks, seq.hashes, seq.num_computed = [], [], 0
            seq.cached_prompt_tokens, seq.t_start = None, None
            self.waiting.appendleft(seq)

    def computed(self, w: Work) -> None:
        """After a step: positions are resident; newly full blocks are hashed (and cached)."""
        s, bs = w.seq, self.block_size
        s.num_computed = w.start + w.n
        for i in range(len(s.hashes), s.num_computed // bs):
            parent = s.hashes[-1] if s.hashes else s.root
            h = chain_hashes(s.tokens[i * bs : (i + 1) * bs], bs, parent)[0]
            s.hashes.append(h)
            if self.enable_prefix_caching:
                self.pool.register(s.blocks[i], h)

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
            self.pool.release(seq.blocks)
            seq.blocks = []
        elif seq in self.waiting:
            self.waiting.remove(seq)
