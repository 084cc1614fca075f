"""`cluster.runtime = "ray"` with no address: the run starts a local Ray, places every role as actors on it and
stops it at the end (tiny model; the multi-node case is tests/cluster/test_cluster_train.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("ray")

from legorl.config import load_config


@pytest.mark.slow
async def test_async_training_with_the_rollout_side_in_a_ray_actor(tmp_path, tiny_run_config, monkeypatch):
    """Ray's file of the last cluster started on the machine names a dead one here (as a killed run leaves it):
    the run must start its own Ray, not try to join that one."""
    import ray

    from legorl.train.loop import train

    if ray.is_initialized():
        pytest.skip("a Ray session is already up in this process")
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    (Path(ray_tmp) / "ray").mkdir()
    (Path(ray_tmp) / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    p = tiny_run_config(
        "r",
        agent={"kwargs": {"tools": False}}, async_training={"enabled": True, "staleness_threshold": 1},
        cluster={"runtime": "ray"},
        trainer={"train_batch_size": 1, "total_steps": 2},
    )
    try:
        history = await train(load_config(p), on_line=lambda _: None, progress=False)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not ray.is_initialized()  # the local cluster this run started is gone
    assert [h["step"] for h in history] == [1, 2]
    assert history[-1]["weight_version"] == 2.0 and history[-1]["actor/grad_norm"] > 0
    assert all(h["fully_async/staleness/max"] <= 1 for h in history)
    root = tmp_path / "runs" / "r"
    assert json.loads((root / "checkpoints" / "step_2" / "trainer_state.json").read_text())["weight_version"] == 2
    assert list((root / "trials").rglob("result.json"))  # the actor wrote the trials where the driver expects
