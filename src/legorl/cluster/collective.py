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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from legorl.cluster.delta import DeltaBase, checksum
from legorl.cluster.delta import apply as apply_delta
from legorl.serving.weight_sync import RemoteBucket

log = logging.getLogger(__name__)


class TransferError(RuntimeError):
    """A weight transfer to or from one peer failed (timed out, or the peer's connection closed)."""


@dataclass(frozen=True)
class CollectiveBucket(RemoteBucket):
    """One bucket sent over the transfer group: its layout (the bytes travel over the pair groups). `ref` is
    unused (None); `seq` numbers the buckets of one sync (the message tag); `peers` are the replica ids the
    sender sends it to (a replica not among them skips it).

    With deltas (`cluster.weight_delta`, cluster/delta.py) the replicas in `delta_peers` receive a `delta` payload
    of `delta_nbytes` (`changed` 16-bit words) and rebuild the bucket from their weights (checked against
    `checksum`); the others receive it whole. `nbytes` is what a replica holding the previous version received,
    `full_nbytes` the whole bucket."""

    seq: int = 0
    dtypes: tuple[str, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()
    peers: tuple[str, ...] = ()
    full_nbytes: int = 0
    delta: str = ""
    delta_peers: tuple[str, ...] = ()
    delta_nbytes: int = 0
    changed: int = 0
    checksum: int = 0


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
            parts.append(torch.zeros(pad, dtype=torch.uint8, device=raw.device))
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

    def __init__(self, timeout_s: float, backend: str = "gloo", delta: bool = False):
        self.timeout_s, self.backend = timeout_s, backend
        self.peers: dict[str, PairGroup] = {}
        self.failed: dict[str, str] = {}
        self._forming: dict[str, tuple[threading.Thread, list[Any]]] = {}
        self.delta = DeltaBase() if delta else None  # the version last sent (cluster.weight_delta)

    def open(self, peer: str) -> int:
        """Start hosting a pair for `peer` on a free port (returned); `finish(peer)` waits for its join. A new
        pair means a replica that lost (or never had) the last version: its next buckets go whole."""
        self.drop(peer)
        if self.delta is not None:
            self.delta.forget(peer)
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
        self.send_each(seq, [(flat, peers)])

    def send_each(self, seq: int, sends: Sequence[tuple[torch.Tensor, Sequence[str]]]) -> None:
        """Each (buffer, peers) of `sends` to those peers, all posted at once, then waited for."""
        works = []
        for flat, peers in sends:
            if not flat.numel():  # an unchanged bucket's delta: no message (the receiver posts none)
                continue
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
    """A replica's side: its `PairGroup` with the sender (known there as `peer`); `receive(meta)` the bucket's
    tensors (views of one buffer) or `TransferError`."""

    def __init__(self) -> None:
        self.pair: PairGroup | None = None
        self.peer = ""

    def join(self, addr: str, port: int, timeout_s: float, backend: str = "gloo", peer: str = "") -> None:
        """Its receives wait up to twice `timeout_s`: the sender may first wait out a stalled sibling replica
        (up to `timeout_s` on the bucket before) and must not make this healthy one time out as well."""
        self.pair = None
        self.pair = PairGroup.join(addr, port, 2 * timeout_s, backend)
        self.peer = peer

    def receive(self, meta: CollectiveBucket, device: torch.device | str = "cpu",
                held: Callable[[tuple[str, ...]], Mapping[str, torch.Tensor]] | None = None) -> dict[str, torch.Tensor]:
        """The bucket's tensors. A delta bucket for this replica is rebuilt onto `held(names)`, the tensors its
        engine serves now (the version the sender's delta starts from)."""
        if self.pair is None:
            raise TransferError("no weight-transfer group: this replica has not joined one")
        is_delta = bool(meta.delta) and self.peer in meta.delta_peers
        if is_delta and held is None:
            raise TransferError(f"bucket {meta.seq} is a delta and this replica cannot read its weights")
        size = meta.delta_nbytes if is_delta else (meta.full_nbytes or meta.nbytes)
        flat = torch.empty(size, dtype=torch.uint8, device=device)
        try:
            if size:
                self.pair.recv(flat, meta.seq)
        except TransferError:
            self.pair = None  # the pair is broken: a revival forms a new one
            raise
        if not is_delta:
            return unpack(flat, meta)
        assert held is not None
        now = held(meta.names)
        base, _, _ = pack({n: now[n].to(getattr(torch, dt)) for n, dt in zip(meta.names, meta.dtypes, strict=True)})
        apply_delta(base, meta.delta, flat, meta.changed)
        if checksum(base) != meta.checksum:
            self.pair = None  # out of step with the sender: a revival forms a new pair and sends it whole
            raise TransferError(f"bucket {meta.seq}: the delta does not rebuild the sender's bucket (this replica "
                                "does not hold the version it starts from)")
        return unpack(base, meta)
