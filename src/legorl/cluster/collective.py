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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from legorl.cluster.delta import DeltaBase, checksum
from legorl.cluster.delta import apply as apply_delta
from legorl.serving.pairgroup import (
    PairGroup,
    TransferError,
    free_port,
    pack,
    padded,
    wait_work,
)
from legorl.serving.weight_sync import RemoteBucket

log = logging.getLogger(__name__)


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


def unpack(flat: torch.Tensor, meta: CollectiveBucket) -> dict[str, torch.Tensor]:
    """Views of `flat` as the bucket's tensors (no copy)."""
    sizes = [getattr(torch, dt).itemsize * int(torch.Size(shape).numel()) for dt, shape in zip(meta.dtypes, meta.shapes,
                                                                                                 strict=True)]
    if sum(map(padded, sizes)) != flat.numel():
        raise TransferError(f"bucket {meta.seq}: layout covers {sum(map(padded, sizes))} bytes, got {flat.numel()}")
    out: dict[str, torch.Tensor] = {}
    off = 0
    for name, dt, shape, n in zip(meta.names, meta.dtypes, meta.shapes, sizes, strict=True):
        out[name] = flat[off:off + n].view(getattr(torch, dt)).view(shape)
        off += padded(n)
    return out


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
                wait_work(work, max(self.timeout_s - (time.monotonic() - t0), 0.1), f"send to {p}")
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
