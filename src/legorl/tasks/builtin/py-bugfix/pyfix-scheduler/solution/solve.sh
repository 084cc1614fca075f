#!/bin/bash
# Oracle for pyfix-scheduler: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- jobq
cat > jobq/scheduler.py <<'LEGORL_EOF'
import heapq
import itertools


class Scheduler:
    """Pops the job with the lowest priority number first."""

    def __init__(self):
        self._heap = []
        self._seq = itertools.count()

    def push(self, priority: int, job) -> None:
        heapq.heappush(self._heap, (priority, next(self._seq), job))

    def pop(self):
        if not self._heap:
            raise IndexError("pop from an empty scheduler")
        return heapq.heappop(self._heap)[-1]

    def __len__(self):
        return len(self._heap)
LEGORL_EOF
