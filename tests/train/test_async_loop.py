"""Fully-async training end to end on the tiny model: on-policy at staleness 0, metrics, checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from legorl.config import ConfigError, load_config
from legorl.train.async_loop import AsyncLoop

BASE = """
[run]
name = "a"
output_dir = "{out}"
[model]
path = "{model}"
[tasks]
train = "builtin:shell-basics"
val_fraction = 0.0
[rollout]
agent = "builtin"
agent_kwargs = {{tools = false}}
max_turns = 1
max_response_len = 8
concurrency = 4
kv_budget_tokens = 8192
train_mode = "async"
staleness_threshold = {staleness}
[algorithm]
n_resp_per_prompt = 2
entropy_coef = 0.01
[trainer]
train_batch_size = 1
total_steps = {steps}
lr = 1e-3
trigger_parameter_sync_step = {trigger}
"""


def cfg_for(tmp_path: Path, model: Path, steps: int = 3, staleness: int = 0, trigger: int = 1, extra=()):
    p = tmp_path / "run.toml"
    p.write_text(BASE.format(out=tmp_path / "runs", model=model, steps=steps, staleness=staleness,
                             trigger=trigger))
    return load_config(p, list(extra))


@pytest.mark.slow
async def test_staleness_zero_trains_on_policy_and_checkpoints(tiny_llama_dir, tmp_path, monkeypatch):
    from legorl.train.run import train

    seen: list[tuple[int, list[list[int]]]] = []
    orig = AsyncLoop._train

    async def spy(self, rollouts):
        seen.append((self.actor_version, [[v for v, m in zip(r.weight_versions, r.response_mask, strict=True) if m]
                                          for r in rollouts]))
        return await orig(self, rollouts)

    monkeypatch.setattr(AsyncLoop, "_train", spy)
    cfg = cfg_for(tmp_path, tiny_llama_dir)
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
async def test_async_with_lag_and_sync_every_two_updates(tiny_llama_dir, tmp_path):
    from legorl.train.run import train

    cfg = cfg_for(tmp_path, tiny_llama_dir, steps=3, staleness=2, trigger=2)
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
