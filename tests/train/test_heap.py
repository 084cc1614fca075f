"""`trim_heap()` hands malloc's freed pages back to the kernel, and the loop runs it on each side of every update
(the update's activations and gradients otherwise stay resident through the next rollout: ~2 GB at 135M,
docs/agent.md, Memory); the 1 MiB mmap threshold holds only while an update runs (`update_heap`)."""

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


def test_learn_runs_the_update_under_the_update_heap(monkeypatch):
    from legorl.train import heap

    calls: list[str] = []

    class Trainer:
        pad_id = 0

        def update(self, batch):
            calls.append("update")
            return {"actor/pg_loss": 0.0}

    monkeypatch.setattr(heap, "trim_heap", lambda: calls.append("trim"))
    monkeypatch.setattr(heap, "fix_mmap_threshold", lambda n: calls.append(f"threshold {n >> 20} MiB"))
    monkeypatch.setattr(steps, "trainable", lambda kept: kept)
    monkeypatch.setattr(steps, "collate", lambda rows, pad_id: rows)
    from _rollout_helpers import trial

    metrics = steps.learn(Trainer(), [trial("t0", "t", [1, 2, 3], [0, 1, 1], [0.0] * 3, reward=1.0)])
    assert calls == ["trim", "threshold 1 MiB", "update", "threshold 32 MiB", "trim"]
    assert metrics["critic/score/mean"] == 1.0


def test_the_update_heap_restores_the_rollout_threshold_when_the_update_fails(monkeypatch):
    from legorl.train import heap

    calls: list[int] = []
    monkeypatch.setattr(heap, "trim_heap", lambda: True)
    monkeypatch.setattr(heap, "fix_mmap_threshold", calls.append)
    with pytest.raises(RuntimeError), heap.update_heap():
        raise RuntimeError("out of memory")
    assert calls == [heap.MMAP_THRESHOLD, heap.ROLLOUT_MMAP_THRESHOLD]


FREED_BLOCKS = r"""
import ctypes, os, sys
from legorl.train.heap import _libc, fix_mmap_threshold, update_heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

libc = _libc()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
big = 2 << 20


def freed_mib():
    blocks, keep = [], []
    for _ in range(64):  # 128 MiB of 2 MiB blocks, each followed by a small live block that pins the heap
        b = libc.malloc(big)
        ctypes.memset(b, 1, big)
        blocks.append(b)
        keep.append(libc.malloc(4096))
    before = rss()
    for b in blocks:
        libc.free(b)
    return (before - rss()) / 2**20


if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
libc.free(libc.malloc(big))  # glibc's dynamic threshold rises to 2 MiB here
if sys.argv[1] == "in an update":
    with update_heap():
        print(freed_mib())
elif sys.argv[1] == "after an update":
    with update_heap():
        pass
    print(freed_mib())
else:
    print(freed_mib())
"""


@pytest.mark.skipif(_libc() is None, reason="glibc only")
@pytest.mark.parametrize("mode", ["fixed", "dynamic", "in an update", "after an update"])
def test_a_fixed_mmap_threshold_returns_freed_large_blocks_at_once(mode):
    """glibc's default threshold grows to the largest mmapped block freed, after which such blocks come from
    the heap and stay resident when freed between live ones; `fix_mmap_threshold` keeps them mmapped. An update
    runs under it; after the update the rollouts' threshold serves them from the heap again (no page faults)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", FREED_BLOCKS, mode], env=env, capture_output=True, text=True,
                         check=True).stdout
    released_mib = float(out.strip())
    if mode in ("fixed", "in an update"):
        assert released_mib > 100
    else:
        assert released_mib < 20


def test_train_cli_tunes_the_heap(monkeypatch):
    from typer.testing import CliRunner

    from legorl.cli import app
    from legorl.train import heap

    calls: list[str] = []
    monkeypatch.setattr(heap, "tune_heap", lambda: calls.append("tune"))
    result = CliRunner().invoke(app, ["train", "/nonexistent.toml"])
    assert result.exit_code != 0 and calls == ["tune"]


def test_legorl_train_sets_the_rollout_threshold_after_the_warm_start(monkeypatch, tmp_path, tiny_run_config):
    """The warm start runs under glibc's dynamic threshold (a fixed 1 MiB made its SFT ~1.2x slower: page faults);
    the RL phase then sets the rollouts' threshold (the updates switch to 1 MiB while they run). The warm start
    and the trainer are replaced here: only the order is under test."""
    import asyncio

    from legorl.config import load_config
    from legorl.train import loop

    calls: list[str] = []

    async def warm_start(cfg, run_dir, model_dir, tasks, on_line):
        calls.append("warm start")
        return model_dir

    class Stop(Exception):
        pass

    def stop(*_a, **_k):
        raise Stop

    monkeypatch.setattr(loop, "warm_start", warm_start)
    monkeypatch.setattr(loop, "fix_mmap_threshold", lambda n: calls.append(f"threshold {n >> 20} MiB"))
    monkeypatch.setattr(loop, "start_trainer", stop)
    monkeypatch.setattr(loop, "start_runtime", stop)
    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n')
    cfg = load_config(tiny_run_config("h", warm_start={"enabled": True, "data": str(demos)}), [])
    with pytest.raises(Stop):
        asyncio.run(loop.train(cfg, progress=False))
    assert calls == ["warm start", "threshold 32 MiB"]
