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


FREED_BLOCKS = r"""
import ctypes, os, sys
from legorl.train.heap import _libc, fix_mmap_threshold

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

libc = _libc()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
big = 2 << 20
libc.free(libc.malloc(big))  # glibc's dynamic threshold rises to 2 MiB here
blocks, keep = [], []
for _ in range(64):  # 128 MiB of 2 MiB blocks, each followed by a small live block that pins the heap
    b = libc.malloc(big)
    ctypes.memset(b, 1, big)
    blocks.append(b)
    keep.append(libc.malloc(4096))
before = rss()
for b in blocks:
    libc.free(b)
print((before - rss()) / 2**20)
"""


@pytest.mark.skipif(_libc() is None, reason="glibc only")
@pytest.mark.parametrize("mode", ["fixed", "dynamic"])
def test_a_fixed_mmap_threshold_returns_freed_large_blocks_at_once(mode):
    """glibc's default threshold grows to the largest mmapped block freed, after which such blocks come from
    the heap and stay resident when freed between live ones; `fix_mmap_threshold` keeps them mmapped."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", FREED_BLOCKS, mode], env=env, capture_output=True, text=True,
                         check=True).stdout
    released_mib = float(out.strip())
    if mode == "fixed":
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


def test_legorl_train_fixes_the_mmap_threshold_after_the_warm_start(monkeypatch, tmp_path, tiny_run_config):
    """The fixed threshold makes the warm start's SFT ~1.2x slower (page faults), so a run sets it only for
    its RL phase. The warm start and the trainer are replaced here: only the order is under test."""
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
    monkeypatch.setattr(loop, "fix_mmap_threshold", lambda: calls.append("threshold"))
    monkeypatch.setattr(loop, "start_trainer", stop)
    monkeypatch.setattr(loop, "start_runtime", stop)
    demos = tmp_path / "demos.jsonl"
    demos.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n')
    cfg = load_config(tiny_run_config("h", warm_start={"enabled": True, "data": str(demos)}), [])
    with pytest.raises(Stop):
        asyncio.run(loop.train(cfg, progress=False))
    assert calls == ["warm start", "threshold"]
