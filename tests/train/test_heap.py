"""`trim_heap()` hands malloc's freed pages back to the kernel, and the loop runs it after every update (the
update's activations and gradients otherwise stay resident through the next rollout: ~2 GB at 135M,
docs/agent.md, Memory)."""

from __future__ import annotations

import os

import pytest
import torch

from legorl.train import steps
from legorl.train.heap import _libc, trim_heap


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(_libc() is None, reason="glibc only")
def test_trim_returns_freed_small_blocks_to_the_kernel():
    """64 KiB buffers stay below glibc's mmap threshold, so freeing them leaves their pages in the heap."""
    keep = torch.ones(16 * 1024)  # allocated after the others: the freed ones are not at the heap's top
    blocks = [torch.ones(16 * 1024) for _ in range(4000)]  # 4000 x 64 KiB = 262 MB, touched
    keep2 = torch.ones(16 * 1024)
    del blocks
    before = rss_bytes()
    assert trim_heap()
    assert before - rss_bytes() > 100e6
    assert float(keep.sum() + keep2.sum()) == 2 * 16 * 1024


def test_learn_trims_after_the_update(monkeypatch):
    calls: list[str] = []

    class Trainer:
        pad_id = 0

        def update(self, batch):
            calls.append("update")
            return {"actor/pg_loss": 0.0}

    monkeypatch.setattr(steps, "trim_heap", lambda: calls.append("trim"))
    monkeypatch.setattr(steps, "trainable", lambda kept: kept)
    monkeypatch.setattr(steps, "collate", lambda rows, pad_id: rows)
    from _rollout_helpers import trial

    metrics = steps.learn(Trainer(), [trial("t0", "t", [1, 2, 3], [0, 1, 1], [0.0] * 3, reward=1.0)])
    assert calls == ["update", "trim"] and metrics["critic/score/mean"] == 1.0
