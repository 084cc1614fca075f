"""Weight sync: push the actor's weights to every replica and bump the weight version.

Atomic across replicas: all replicas are paused (in-flight requests finish, or abort for partial
rollout) before any is updated, and resumed only once all hold the new version, so no two requests
issued after the sync see different weights.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Bucket = Mapping[str, Any]


@dataclass(frozen=True)
class RemoteBucket:
    """A bucket that stays where it was produced (a Ray object `ref` put by a trainer rank): targets that take
    it (Ray replica handles) pass the ref on, so the tensors go from the object store to each replica's node
    without passing through the driver. `nbytes` is known without fetching it."""

    ref: Any
    nbytes: int
    names: tuple[str, ...] = ()

# a producer hands buckets to `emit` and returns the bytes it produced (e.g. Trainer.stream_weights)
Producer = Callable[[Callable[[Bucket], None]], int]


class WeightTarget(Protocol):
    """What a weight sync needs of a replica (an `Engine`, or a handle on a remote one).

    A target whose class sets `accepts_weight_buckets = True` is given each bucket of a streamed push as
    it comes (the embedded engines copy tensors in place); any other (vLLM, which reloads a whole
    checkpoint per call) gets the buckets merged into one update after the last one."""

    @property
    def weight_version(self) -> int: ...

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None: ...

    async def update_weights(self, state_dict: Mapping[str, Any], version: int,
                             mode: Literal["wait", "abort"] = "wait") -> None: ...

    async def resume(self) -> None: ...


class WeightSync:
    def __init__(self, engines: Sequence[WeightTarget], in_place: bool = False):
        """`in_place`: the engines serve the trainer's own parameter tensors (`serving.share_trainer_model`); a
        push still pauses them and bumps the version (their prefix caches hold KV of the old weights), but no
        byte moves, so `last_bytes` stays 0."""
        self.engines = list(engines)
        self.in_place = in_place
        self.version = max((e.weight_version for e in self.engines), default=0)
        self.last_duration_s = 0.0
        self.last_bytes = 0
        self.last_full_bytes = 0  # the whole weights' bytes (last_bytes is less with deltas)
        self.retries = 0  # pushes made again after a replica failed mid-sync (train/steps.push_weights)

    async def push(
        self, state_dict: Mapping[str, Any], version: int | None = None, mode: Literal["wait", "abort"] = "wait"
    ) -> int:
        """All of `state_dict` to every replica as weight version `version` (None: the next one)."""
        return await self._push(iter([state_dict]), version, mode)

    async def push_stream(self, produce: Producer, version: int | None = None,
                          mode: Literal["wait", "abort"] = "wait") -> int:
        """Weights that `produce` emits bucket by bucket (in a thread; one bucket in flight, so memory
        stays at one bucket beyond the replicas' own weights), applied to every replica as they come."""
        q: queue.Queue = queue.Queue(maxsize=1)
        done = object()
        failure: list[BaseException] = []
        cancelled = threading.Event()

        def emit(bucket: Bucket) -> None:
            while not cancelled.is_set():  # after a failed push the producer runs to its end, dropping
                try:
                    q.put(bucket, timeout=0.1)
                    return
                except queue.Full:
                    continue

        def run() -> None:
            try:
                produce(emit)
            except BaseException as exc:  # handed to the consumer below
                failure.append(exc)
            finally:
                while not cancelled.is_set():
                    try:
                        q.put(done, timeout=0.1)
                        break
                    except queue.Full:
                        continue

        threading.Thread(target=run, name="weight-stream", daemon=True).start()

        def buckets() -> Iterable[Bucket]:
            while (item := q.get()) is not done:
                yield item
            if failure:
                raise failure[0]

        try:
            return await self._push(iter(buckets()), version, mode)
        except BaseException:
            cancelled.set()
            raise

    async def _push(self, buckets, version: int | None, mode: Literal["wait", "abort"]) -> int:
        version = self.version + 1 if version is None else version
        t0 = time.perf_counter()
        nbytes = full = 0
        streamed = [e for e in self.engines if getattr(e, "accepts_weight_buckets", False)]
        whole = [e for e in self.engines if e not in streamed]
        merged: dict[str, Any] = {}
        await asyncio.gather(*(e.pause(mode) for e in self.engines))
        try:
            end = object()
            while (bucket := await asyncio.to_thread(next, buckets, end)) is not end:
                nbytes += bucket_nbytes(bucket)
                full += getattr(bucket, "full_nbytes", 0) or bucket_nbytes(bucket)
                await asyncio.gather(*(e.update_weights(bucket, version, mode) for e in streamed))
                if whole:
                    merged.update(_local(bucket))
            if whole:
                await asyncio.gather(*(e.update_weights(merged, version, mode) for e in whole))
        finally:
            await asyncio.gather(*(e.resume() for e in self.engines))
        self.version = version
        self.last_duration_s = time.perf_counter() - t0
        self.last_bytes = 0 if self.in_place else nbytes
        self.last_full_bytes = full
        return version


def bucket_nbytes(bucket: Bucket | RemoteBucket) -> int:
    if isinstance(bucket, RemoteBucket):
        return bucket.nbytes
    return sum(_nbytes(v) for v in bucket.values())


def _local(bucket: Bucket | RemoteBucket) -> Bucket:
    """The tensors of a bucket, fetched when remote (for a target that needs the whole state in one call)."""
    if isinstance(bucket, RemoteBucket):
        import ray

        return ray.get(bucket.ref)
    return bucket


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size"):
        return value.numel() * value.element_size()
    return int(getattr(value, "nbytes", 0))
