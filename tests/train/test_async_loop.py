"""Fully-async training end to end on the tiny model: on-policy at staleness 0, metrics, checkpoints."""

from __future__ import annotations

import json

import pytest

from legorl.config import ConfigError, load_config
from legorl.train.async_loop import AsyncLoop


def cfg_for(tiny_run_config, steps: int = 3, staleness: int = 0, trigger: int = 1, extra=()):
    p = tiny_run_config(
        "a",
        rollout={"agent_kwargs": {"tools": False}, "train_mode": "async", "staleness_threshold": staleness},
        trainer={"train_batch_size": 1, "total_steps": steps, "trigger_parameter_sync_step": trigger},
    )
    return load_config(p, list(extra))


@pytest.mark.slow
async def test_staleness_zero_trains_on_policy_and_checkpoints(tmp_path, monkeypatch, tiny_run_config):
    from legorl.train.run import train

    seen: list[tuple[int, list[list[int]]]] = []
    orig = AsyncLoop._train

    async def spy(self, rollouts):
        seen.append((self.actor_version, [[v for v, m in zip(r.weight_versions, r.response_mask, strict=True) if m]
                                          for r in rollouts]))
        return await orig(self, rollouts)

    monkeypatch.setattr(AsyncLoop, "_train", spy)
    cfg = cfg_for(tiny_run_config)
    assert cfg.rollout.partial_enabled
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
    from legorl.train.run import train

    cfg = cfg_for(tiny_run_config, steps=3, staleness=2, trigger=2)
    history = await train(cfg, on_line=lambda _: None, progress=False)
    assert [h["step"] for h in history] == [1, 2, 3]
    assert ["timing/weight_sync_s" in h for h in history] == [False, True, True]  # every 2, and at the end
    assert all(h["fully_async/staleness/max"] <= 2 for h in history)
    assert history[-1]["weight_version"] == history[-1]["actor_version"] == 3.0


def test_config_refuses_a_sync_interval_the_staleness_bound_cannot_hold(tmp_path):
    with pytest.raises(ConfigError, match="staleness_threshold must be >= 1"):
        load_config(None, ["rollout.train_mode=async", "trainer.trigger_parameter_sync_step=2"])
    with pytest.raises(ConfigError, match="only applies to rollout"):
        load_config(None, ["trainer.trigger_parameter_sync_step=2", "rollout.staleness_threshold=1"])
    assert not load_config(None, []).rollout.partial_enabled
    assert load_config(None, ["rollout.train_mode=async", "rollout.partial_rollout=false"]).rollout.partial_enabled is False
