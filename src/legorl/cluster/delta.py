"""Lossless weight deltas for the collective transport (`cluster.weight_delta = true`): per bucket, only the
16-bit words that changed since the version the replica holds, or the whole bucket when that is not smaller.

Why 16-bit words of the packed bucket (`serving.pairgroup.pack`), whatever the dtype: a bf16 element is one word, so a
bf16 delta skips exactly the bitwise-unchanged elements; an fp32 element is two words, and a small update often
leaves its high word (sign, exponent, top of the mantissa) alone, so even fp32 saves a little. Comparing as
integers makes "unchanged" mean bitwise (NaN and -0.0 included).

Encodings of one bucket of `n` words with `k` changed (the sender picks the smallest):
- `full`: the bucket itself, 2n bytes;
- `mask`: a bitmask of the changed words (n/8 bytes, padded to 16) then their new values (2k bytes);
- `index`: the changed words' int32 positions (4k bytes) then their values (2k bytes);
- `same`: nothing changed, nothing is sent.

Each delta bucket carries the sum of the new bucket's 64-bit words (mod 2**64): the receiver rebuilds the bucket from
the weights it serves and checks that sum, so a replica that does not hold the sender's base fails loudly (it is
marked dead and revived with a full sync) instead of serving wrong weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch


def _pad16(n: int) -> int:
    return -(-n // 16) * 16


def checksum(flat: torch.Tensor) -> int:
    """The sum of the bucket's 64-bit words modulo 2**64."""
    if flat.device.type == "cpu":
        return int(flat.numpy().view(np.uint64).sum(dtype=np.uint64))
    return int(flat.view(torch.int64).sum()) & (2**64 - 1)  # GPU (untested): torch's int64 sum wraps alike


@dataclass(frozen=True)
class Delta:
    """One bucket's delta: `kind` (`mask`, `index` or `same`), the `payload` bytes to send, `changed` words, and
    the `checksum` of the bucket it rebuilds."""

    kind: str
    payload: torch.Tensor
    changed: int
    checksum: int


def encode(old: torch.Tensor, new: torch.Tensor) -> Delta | None:
    """The smallest delta turning packed bucket `old` into `new` (same size), or None when the full bucket is
    not larger (send it whole). numpy on CPU: its bit packing and compaction are several times torch's here."""
    if old.numel() != new.numel() or new.numel() % 16:
        return None
    if new.device.type != "cpu":  # (untested: NCCL senders pack on the CPU)
        return encode(old.cpu(), new.cpu())
    o, w = old.numpy().view(np.int16), new.numpy().view(np.int16)
    changed = o != w
    k = int(np.count_nonzero(changed))
    n = w.size
    mask_bytes = _pad16(n // 8) + 2 * k
    index_bytes = 6 * k if n < 2**31 else None
    best = min(b for b in (mask_bytes, index_bytes) if b is not None)
    if best >= new.numel():
        return None
    if k == 0:  # nothing changed: nothing to send (no message at all)
        return Delta("same", torch.empty(0, dtype=torch.uint8), 0, checksum(new))
    if index_bytes is not None and index_bytes <= mask_bytes:
        idx = np.flatnonzero(changed).astype(np.int32)
        payload = np.concatenate([idx.view(np.uint8), w[idx].view(np.uint8)])
        return Delta("index", torch.from_numpy(payload), k, checksum(new))
    bits = np.packbits(changed, bitorder="little")
    pad = np.zeros(_pad16(bits.size) - bits.size, dtype=np.uint8)
    payload = np.concatenate([bits, pad, np.compress(changed, w).view(np.uint8)])
    return Delta("mask", torch.from_numpy(payload), k, checksum(new))


def apply(base: torch.Tensor, kind: str, payload: torch.Tensor, changed: int) -> None:
    """Turn packed bucket `base` into the sender's new bucket in place."""
    if kind == "same":
        return
    if kind not in ("index", "mask"):
        raise ValueError(f"unknown delta encoding {kind!r}")
    if base.device.type != "cpu":  # (untested: a replica on a GPU)
        host = base.cpu()
        apply(host, kind, payload.cpu(), changed)
        base.copy_(host)
        return
    w, raw = base.numpy().view(np.int16), payload.numpy()
    if kind == "index":
        idx = raw[:4 * changed].view(np.int32)
        w[idx] = raw[4 * changed:].view(np.int16)
    else:
        nbits = w.size // 8
        idx = np.flatnonzero(np.unpackbits(raw[:nbits], bitorder="little"))
        w[idx] = raw[_pad16(nbits):].view(np.int16)


def payload_nbytes(kind: str, nbytes: int, changed: int) -> int:
    """The payload size of a `kind` delta of an `nbytes` bucket with `changed` words (what the receiver posts)."""
    if kind == "same":
        return 0
    if kind == "index":
        return 6 * changed
    return _pad16(nbytes // 16) + 2 * changed


class DeltaBase:
    """The sender's side: the packed buckets it last sent (one more copy of the weights on trainer rank 0) and
    the replicas that hold exactly them (they got every bucket of that export). A replica whose pair was formed
    since (revived, added) or that missed an export is not among them: it gets full buckets."""

    def __init__(self) -> None:
        self.buckets: dict[int, tuple[tuple[str, ...], torch.Tensor]] = {}
        self.holders: set[str] = set()
        self._seen: dict[int, tuple[tuple[str, ...], torch.Tensor]] = {}
        self._unchanged = True
        self._open = False

    def begin(self) -> None:
        if self._open:  # the last export never finished: its buckets and holders are unknown
            self.buckets, self.holders = {}, set()
        self._seen, self._unchanged, self._open = {}, True, True

    def encode(self, seq: int, names: tuple[str, ...], flat: torch.Tensor, delta_peers: bool) -> Delta | None:
        """The delta of bucket `seq` against the base (None: send it whole); `flat` becomes the base once the
        export finishes. `delta_peers`: some receiver holds the base (else only whether it changed is checked)."""
        self._seen[seq] = (names, flat)
        base = self.buckets.get(seq)
        if base is None or base[0] != names or base[1].numel() != flat.numel():
            self._unchanged = False
            return None
        if not delta_peers:
            self._unchanged = self._unchanged and torch.equal(base[1], flat)
            return None
        delta = encode(base[1], flat)
        self._unchanged = self._unchanged and (delta is not None and delta.changed == 0)
        return delta

    def finish(self, received_all: Iterable[str]) -> None:
        """The export is over; `received_all`: the replicas that got every bucket of it. When nothing changed
        since the base (a revival's full sync of the same version) the earlier holders still hold it."""
        got = set(received_all)
        same = self._unchanged and set(self._seen) == set(self.buckets)
        self.holders = (self.holders | got) if same else got
        self.buckets, self._seen, self._open = self._seen, {}, False

    def forget(self, peer: str) -> None:
        self.holders.discard(peer)
