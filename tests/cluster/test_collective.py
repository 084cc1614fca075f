"""The weight-transfer group (cluster/collective.py) on real gloo pair groups, both ends in this process (threads):
the bytes arrive bitwise, a peer that never answers fails the operation within its timeout instead of hanging,
and the sender drops a failed peer while the others still get every bucket. No Ray: fast."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from legorl.cluster.collective import CollectiveBucket, Receiver, Sender, unpack
from legorl.serving.pairgroup import TransferError, pack


def _pair(sender: Sender, peer: str, timeout_s: float = 2.0) -> Receiver:
    port = sender.open(peer)
    rec = Receiver()
    t = threading.Thread(target=rec.join, args=("127.0.0.1", port, timeout_s))
    t.start()
    sender.finish(peer)
    t.join()
    return rec


def _bucket(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(300, 7, generator=g), "b": torch.randn(7, generator=g).to(torch.bfloat16),
            "i": torch.randint(0, 1 << 40, (5,), generator=g), "x": torch.randn(4, 4, generator=g).t()}


def _meta(bucket, seq: int, peers) -> tuple[torch.Tensor, CollectiveBucket]:
    flat, dtypes, shapes = pack(bucket)
    return flat, CollectiveBucket(None, flat.numel(), tuple(bucket), seq, dtypes, shapes, tuple(peers))


def test_pack_unpack_is_bitwise_for_mixed_dtypes_and_layouts():
    b = _bucket(0)
    flat, meta = _meta(b, 0, ())
    out = unpack(flat.clone(), meta)
    assert list(out) == list(b)
    assert all(out[k].dtype == b[k].dtype and torch.equal(out[k], b[k]) for k in b)
    with pytest.raises(TransferError):
        unpack(flat[:-1], meta)


def test_buckets_arrive_bitwise_and_a_silent_or_failed_peer_never_hangs():
    sender = Sender(timeout_s=2.0)
    a, b = _pair(sender, "a"), _pair(sender, "b")
    got: dict[str, list] = {"a": [], "b": []}
    buckets = [_bucket(s) for s in range(3)]

    def receive(name: str, rec: Receiver, n: int) -> None:
        for seq in range(n):
            try:
                got[name].append(rec.receive(_meta(buckets[seq], seq, ("a", "b"))[1]))
            except TransferError as exc:
                got[name].append(exc)
                return

    # "b" takes the first bucket only, then goes silent: its receive of bucket 1 is never posted
    ta = threading.Thread(target=receive, args=("a", a, 3))
    tb = threading.Thread(target=receive, args=("b", b, 1))
    ta.start(), tb.start()
    t0 = time.monotonic()
    for seq, bucket in enumerate(buckets):
        sender.send(_meta(bucket, seq, ())[0], seq, ["a", "b"])
    ta.join(10), tb.join(10)
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0 * 2 + 3  # bounded by the timeout (once: b is dropped after its first failure)
    assert list(sender.peers) == ["a"] and "b" in sender.failed
    for seq, out in enumerate(got["a"]):
        assert all(torch.equal(out[k], buckets[seq][k]) for k in buckets[seq])
    assert len(got["b"]) == 1 and torch.equal(got["b"][0]["w"], buckets[0]["w"])
    # a receiver whose sender never sends: TransferError within its bound (twice the timeout: the sender may be
    # waiting out a stalled sibling), and its pair is given up
    t0 = time.monotonic()
    with pytest.raises(TransferError):
        a.receive(_meta(buckets[0], 9, ())[1])
    assert time.monotonic() - t0 < 2 * 2.0 + 2 and a.pair is None
    with pytest.raises(TransferError, match="has not joined"):
        a.receive(_meta(buckets[0], 10, ())[1])
