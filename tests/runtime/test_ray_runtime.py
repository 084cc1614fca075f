"""`rollout.runtime = "ray"`: the rollout side in a Ray actor, the trainer in the driver (tiny model)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

from legorl.config import load_config

BASE = """
[run]
name = "r"
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
staleness_threshold = 1
runtime = "ray"
[algorithm]
n_resp_per_prompt = 2
entropy_coef = 0.01
[trainer]
train_batch_size = 1
total_steps = 2
lr = 1e-3
"""


@pytest.mark.slow
async def test_async_training_with_the_rollout_side_in_a_ray_actor(tiny_llama_dir, tmp_path):
    import ray

    from legorl.train.run import train

    if ray.is_initialized():
        pytest.skip("a Ray session is already up in this process")
    p = tmp_path / "run.toml"
    p.write_text(BASE.format(out=tmp_path / "runs", model=tiny_llama_dir))
    history = await train(load_config(p), on_line=lambda _: None, progress=False)
    assert not ray.is_initialized()  # the local cluster this run started is gone
    assert [h["step"] for h in history] == [1, 2]
    assert history[-1]["weight_version"] == 2.0 and history[-1]["actor/grad_norm"] > 0
    assert all(h["fully_async/staleness/max"] <= 1 for h in history)
    root = tmp_path / "runs" / "r"
    assert json.loads((root / "checkpoints" / "step_2" / "trainer_state.json").read_text())["weight_version"] == 2
    assert list((root / "trials").rglob("result.json"))  # the actor wrote the trials where the driver expects
