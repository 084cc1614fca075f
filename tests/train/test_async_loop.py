"""Fully-async training end to end on the tiny model: on-policy at staleness 0, metrics, checkpoints."""

from __future__ import annotations

import json

import pytest

from legorl.config import ConfigError, load_config
from legorl.train import loop


def cfg_for(tiny_run_config, steps: int = 3, staleness: int = 0, trigger: int = 1, extra=()):
    p = tiny_run_config(
        "a",
        agent={"kwargs": {"tools": False}},
        async_training={"enabled": True, "staleness_threshold": staleness, "trigger_parameter_sync_step": trigger},
        trainer={"train_batch_size": 1, "total_steps": steps},
    )
    return load_config(p, list(extra))


@pytest.mark.slow
async def test_staleness_zero_trains_on_policy_and_checkpoints(tmp_path, monkeypatch, tiny_run_config):
    from legorl.train.loop import train

    seen: list[tuple[int, list[list[int]]]] = []
    orig = loop.learn

    def spy(trainer, kept):  # the actor's version before this update = updates it has taken so far
        seen.append((int(trainer.actor.scheduler.last_epoch), [r.policy_versions() for r in kept]))
        return orig(trainer, kept)

    monkeypatch.setattr(loop, "learn", spy)
    cfg = cfg_for(tiny_run_config)
    assert cfg.async_training.partial_enabled
    lines: list[str] = []
    history = await train(cfg, on_line=lines.append, progress=False)
    assert [h["step"] for h in history] == [1, 2, 3]
    assert [a for a, _ in seen] == [0, 1, 2]
    for actor_version, per_rollout in seen:
        assert per_rollout and all(vs and set(vs) == {actor_version} for vs in per_rollout)
    for h in history:
        assert h["fully_async/staleness/max"] == 0.0 and h["trajectory_filter/dropped_stale"] == 0.0
        assert h["actor/grad_norm"] > 0 and "rollout_is/ess" in h  # token-level IS is the async default
        assert 0.0 <= h["fully_async/trainer/idle_ratio"] <= 1.0
        assert "timing/weight_sync_s" in h and "fully_async/partial/partial_ratio" in h
    assert history[-1]["weight_version"] == 3.0
    root = tmp_path / "runs" / "a"
    logged = [json.loads(x)["step"] for x in (root / "logs" / "a.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3] and any(line.startswith("step:3 - ") for line in lines)
    state = json.loads((root / "checkpoints" / "step_3" / "trainer_state.json").read_text())
    assert state["weight_version"] == 3
    # --resume: the engines get the checkpoint's weights and version, the actor continues from it
    more = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"total_steps": 4})})
    seen.clear()
    again = await train(more, resume=True, on_line=lines.append, progress=False)
    assert [h["step"] for h in again] == [4] and [a for a, _ in seen] == [3]
    assert all(set(vs) == {3} for vs in seen[0][1]) and again[0]["weight_version"] == 4.0


@pytest.mark.slow
async def test_async_with_lag_and_sync_every_two_updates(tiny_run_config):
    from legorl.train.loop import train

    cfg = cfg_for(tiny_run_config, steps=3, staleness=2, trigger=2)
    history = await train(cfg, on_line=lambda _: None, progress=False)
    assert [h["step"] for h in history] == [1, 2, 3]
    assert ["timing/weight_sync_s" in h for h in history] == [False, True, True]  # every 2, and at the end
    assert all(h["fully_async/staleness/max"] <= 2 for h in history)
    assert history[-1]["weight_version"] == history[-1]["actor_version"] == 3.0


def test_config_refuses_a_sync_interval_the_staleness_bound_cannot_hold(tmp_path):
    with pytest.raises(ConfigError, match="staleness_threshold must be >= 1"):
        load_config(None, ["async_training.enabled=true", "async_training.trigger_parameter_sync_step=2"])
    with pytest.raises(ConfigError, match=r"only applies with async_training\.enabled"):
        load_config(None, ["async_training.trigger_parameter_sync_step=2", "async_training.staleness_threshold=1"])
    assert not load_config(None, []).async_training.partial_enabled
    off = load_config(None, ["async_training.enabled=true", "async_training.partial_rollout=false"])
    assert off.async_training.partial_enabled is False


def test_keys_of_the_flat_layout_are_read_under_their_new_names():
    from legorl.config import ConfigKeyMoved

    with pytest.warns(ConfigKeyMoved) as moved:
        cfg = load_config(None, ["rollout.train_mode=async", "rollout.staleness_threshold=1",
                                 "serving.vllm_dtype=bfloat16", "serving.scheduler=true", "rollout.agent=nop"])
    assert len(moved) == 5 and "rollout.train_mode moved to async_training.enabled" in str(moved[0].message)
    assert cfg.async_training.enabled and cfg.async_training.staleness_threshold == 1
    assert cfg.serving.vllm.dtype == "bfloat16" and cfg.serving.scheduler.enabled and cfg.agent.name == "nop"


def test_async_update_threads_default_to_the_cores_the_engine_leaves_or_the_config():
    """`async_training.trainer_threads` sets the update's torch threads beside a generating engine; by
    default the update takes the cores the in-process engines leave (at least 1)."""
    import os

    from legorl.config import load_config
    from legorl.train.loop import _trainer_threads

    cores = os.cpu_count() or 1
    cfg = load_config(None, ["async_training.enabled=true", "serving.threads_per_replica=1"])
    assert _trainer_threads(cfg) == max(1, cores - 1)
    assert _trainer_threads(load_config(None, ["async_training.enabled=true", "async_training.trainer_threads=3"])) == 3
    assert _trainer_threads(load_config(None, ["async_training.enabled=true", "async_training.trainer_threads=0"])) == cores
    assert _trainer_threads(load_config(None, ["async_training.enabled=true", "serving.placement=process"])) is None
