"""The weight-transfer group: trainer rank 0 sends each weight bucket straight to every engine replica over
torch.distributed (`cluster.weight_transport = "collective"`), instead of through Ray's object store.

One pair group per replica (world size 2: sender rank 0, replica rank 1), built from its own TCPStore, so a
replica that dies or stalls breaks only its own pair: the sender drops it and goes on with the others, and a
revived replica gets a fresh pair. Each bucket travels as one flat byte buffer (`pack`), its layout (names,
dtypes, shapes) as a small `CollectiveBucket` through Ray, so the bytes on the wire are the weights' own and
the receiver's copy is bitwise the sender's. Every operation has a timeout (`cluster.weight_sync_timeout_s`):
gloo raises when it passes, so a sync never waits forever on a peer that went silent.

Backend: gloo for CPU tensors; NCCL when the sender's tensors are on a GPU (`backend_for`). The NCCL branch is
the same code with another process-group class and CUDA buffers; it cannot run on this machine and is untested.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from legorl.serving.weight_sync import RemoteBucket

log = logging.getLogger(__name__)


class TransferError(RuntimeError):
    """A weight transfer to or from one peer failed (timed out, or the peer's connection closed)."""


@dataclass(frozen=True)
class CollectiveBucket(RemoteBucket):
    """One bucket sent over the transfer group: its layout (the bytes travel over the pair groups). `ref` is
    unused (None); `seq` numbers the buckets of one sync (the message tag); `peers` are the replica ids the
    sender sends it to (a replica not among them skips it)."""

    seq: int = 0
    dtypes: tuple[str, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()
    peers: tuple[str, ...] = ()


def backend_for(device: torch.device | str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


ALIGN = 16  # each tensor starts at a multiple of this in the flat buffer (so its view is aligned for its dtype)


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def pack(bucket: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """The bucket as one flat uint8 tensor (its tensors' bytes back to back, each padded to `ALIGN`), with
    their dtypes and shapes."""
    parts = []
    for t in bucket.values():
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
        parts.append(raw)
        if (pad := _padded(raw.numel()) - raw.numel()):
            parts.append(torch.zeros(pad, dtype=torch.uint8))
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    dtypes = tuple(str(t.dtype).removeprefix("torch.") for t in bucket.values())
    return flat, dtypes, tuple(tuple(t.shape) for t in bucket.values())


def unpack(flat: torch.Tensor, meta: CollectiveBucket) -> dict[str, torch.Tensor]:
    """Views of `flat` as the bucket's tensors (no copy)."""
    sizes = [getattr(torch, dt).itemsize * int(torch.Size(shape).numel()) for dt, shape in zip(meta.dtypes, meta.shapes,
                                                                                                 strict=True)]
    if sum(map(_padded, sizes)) != flat.numel():
        raise TransferError(f"bucket {meta.seq}: layout covers {sum(map(_padded, sizes))} bytes, got {flat.numel()}")
    out: dict[str, torch.Tensor] = {}
    off = 0
    for name, dt, shape, n in zip(meta.names, meta.dtypes, meta.shapes, sizes, strict=True):
        out[name] = flat[off:off + n].view(getattr(torch, dt)).view(shape)
        off += _padded(n)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class PairGroup:
    """A 2-member process group between the sender (rank 0) and one replica (rank 1), with a timeout on
    every operation. Built on both sides at once: the sender hosts the store (`host`), the replica joins."""

    def __init__(self, pg: Any, rank: int, store: Any, timeout_s: float):
        self.pg, self.rank, self.store, self.timeout_s = pg, rank, store, timeout_s

    @classmethod
    def host(cls, port: int, timeout_s: float, backend: str = "gloo") -> PairGroup:
        """The sender's side; blocks until the replica joined (or `timeout_s` passed)."""
        store = dist.TCPStore("0.0.0.0", port, 2, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return cls(_new_pg(backend, store, 0, timeout_s), 0, store, timeout_s)

    @classmethod
    def join(cls, addr: str, port: int, timeout_s: float, backend: str = "gloo") -> PairGroup:
        """The replica's side; blocks until the sender is there (or `timeout_s` passed)."""
        store = dist.TCPStore(addr, port, 2, False, timedelta(seconds=timeout_s))
        return cls(_new_pg(backend, store, 1, timeout_s), 1, store, timeout_s)

    def send(self, flat: torch.Tensor, tag: int) -> Any:
        return self.pg.send([flat], 1, tag)

    def recv(self, flat: torch.Tensor, tag: int) -> None:
        _wait(self.pg.recv([flat], 0, tag), self.timeout_s, "receive")

    def close(self) -> None:
        self.pg = self.store = None


def _new_pg(backend: str, store: Any, rank: int, timeout_s: float) -> Any:
    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":  # untested here (no GPU): the same pair, over NCCL
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, 2, opts)
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def _wait(work: Any, timeout_s: float, what: str) -> None:
    try:
        if not work.wait(timedelta(seconds=timeout_s)):
            raise TransferError(f"weight {what} did not finish within {timeout_s:.0f} s")
    except TransferError:
        raise
    except Exception as exc:  # gloo: timeout or a closed connection
        raise TransferError(f"weight {what} failed: {exc}") from exc


class Sender:
    """Trainer rank 0's side: one `PairGroup` per replica id. `send(bucket)` posts the bucket to every live
    peer at once and waits for them all; a peer that fails is dropped (the others still get every bucket) and
    named in `failed`."""

    def __init__(self, timeout_s: float, backend: str = "gloo"):
        self.timeout_s, self.backend = timeout_s, backend
        self.peers: dict[str, PairGroup] = {}
        self.failed: dict[str, str] = {}
        self._forming: dict[str, tuple[threading.Thread, list[Any]]] = {}

    def open(self, peer: str) -> int:
        """Start hosting a pair for `peer` on a free port (returned); `finish(peer)` waits for its join."""
        self.drop(peer)
        port = free_port()
        box: list[Any] = []

        def host() -> None:
            try:
                box.append(PairGroup.host(port, self.timeout_s, self.backend))
            except BaseException as exc:
                box.append(exc)

        t = threading.Thread(target=host, name=f"weight-pair-{peer}", daemon=True)
        t.start()
        self._forming[peer] = (t, box)
        return port

    def finish(self, peer: str) -> None:
        t, box = self._forming.pop(peer)
        t.join(self.timeout_s + 5)
        if not box or isinstance(box[0], BaseException):
            raise TransferError(f"weight-transfer pair with {peer} not formed: {box[0] if box else 'timed out'}")
        self.peers[peer] = box[0]

    def drop(self, peer: str) -> None:
        pair = self.peers.pop(peer, None)
        if pair is not None:
            pair.close()

    def send(self, flat: torch.Tensor, seq: int, peers: Sequence[str]) -> None:
        works = []
        for p in peers:
            pair = self.peers.get(p)
            if pair is None:
                continue
            try:
                works.append((p, pair.send(flat, seq)))
            except Exception as exc:
                self._lost(p, exc)
        t0 = time.monotonic()
        for p, work in works:
            try:
                _wait(work, max(self.timeout_s - (time.monotonic() - t0), 0.1), f"send to {p}")
            except TransferError as exc:
                self._lost(p, exc)

    def _lost(self, peer: str, exc: BaseException) -> None:
        log.warning("weight transfer to %s failed; dropping it from this sync: %s", peer, exc)
        self.failed[peer] = str(exc)
        self.drop(peer)


class Receiver:
    """A replica's side: its `PairGroup` with the sender; `receive(meta)` the bucket's tensors (views of one
    buffer) or `TransferError`."""

    def __init__(self) -> None:
        self.pair: PairGroup | None = None

    def join(self, addr: str, port: int, timeout_s: float, backend: str = "gloo") -> None:
        """Its receives wait up to twice `timeout_s`: the sender may first wait out a stalled sibling replica
        (up to `timeout_s` on the bucket before) and must not make this healthy one time out as well."""
        self.pair = None
        self.pair = PairGroup.join(addr, port, 2 * timeout_s, backend)

    def receive(self, meta: CollectiveBucket, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        if self.pair is None:
            raise TransferError("no weight-transfer group: this replica has not joined one")
        flat = torch.empty(meta.nbytes, dtype=torch.uint8, device=device)
        try:
            self.pair.recv(flat, meta.seq)
        except TransferError:
            self.pair = None  # the pair is broken: a revival forms a new one
            raise
        return unpack(flat, meta)
