"""`serving.free_kv_during_update`: the in-process runtime's `updating()` puts every embedded replica to sleep (its KV
pool freed) for the update and wakes it after, even when the update fails; configs it cannot apply to are refused
with one line. `legorl train` with it on is driven by tests/train/test_agent_lookact.py (the example sets it)."""

from __future__ import annotations

import re

import pytest

from legorl.config import ConfigError, load_config
from legorl.rundir import RunDir
from legorl.runtime.inprocess import InProcessRuntime
from legorl.serving.types import GenerateRequest, SamplingParams


async def _kv(rt: InProcessRuntime) -> list[int]:
    return [s.kv_bytes for s in await rt.engine_stats()]


@pytest.mark.parametrize("free", [True, False])
async def test_updating_frees_every_replicas_pool_and_gives_it_back(tiny_llama_dir, tmp_path, free):
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "serving.kv_budget_tokens=2048", "serving.n_replicas=2",
                             f"serving.free_kv_during_update={str(free).lower()}"])
    rt = await InProcessRuntime.start(cfg, RunDir(tmp_path, "r"))
    try:
        full = await _kv(rt)
        assert len(full) == 2 and min(full) > 0
        async with rt.updating():
            assert await _kv(rt) == ([0, 0] if free else full)
        assert await _kv(rt) == full
        with pytest.raises(RuntimeError, match="update failed"):
            async with rt.updating():
                raise RuntimeError("update failed")
        assert await _kv(rt) == full and not any(s.paused for s in await rt.engine_stats())
        out = await rt.engines[1].generate(GenerateRequest([5, 9, 17, 4], SamplingParams(max_tokens=3, seed=0)))
        assert len(out.token_ids) == 3  # the woken replica serves
    finally:
        await rt.close()


@pytest.mark.parametrize(("overrides", "message"), [
    (["async_training.enabled=true"], "the replicas generate through the update"),
    (["serving.engine=vllm"], "needs serving.engine='embedded' and cluster.runtime='local'"),
    (["cluster.runtime=ray"], "needs serving.engine='embedded' and cluster.runtime='local'"),
])
def test_configs_it_cannot_apply_to_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["serving.free_kv_during_update=true", *overrides])
