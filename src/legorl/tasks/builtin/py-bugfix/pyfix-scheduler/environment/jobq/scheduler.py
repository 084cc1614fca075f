import heapq


class Scheduler:
    """Pops the job with the lowest priority number first."""

    def __init__(self):
        self._heap = []

    def push(self, priority: int, job) -> None:
        heapq.heappush(self._heap, (priority, job))

    def pop(self):
        if not self._heap:
            raise IndexError("pop from an empty scheduler")
        return heapq.heappop(self._heap)[-1]

    def __len__(self):
        return len(self._heap)
