"""The in-process runtime picks the single-replica manager or the pool from the config, and the
proxy serves through either (real engines, real HTTP, the official openai client)."""

from __future__ import annotations

import openai
import pytest

from legorl.config import load_config
from legorl.rundir import RunDir
from legorl.runtime.inprocess import InProcessRuntime


@pytest.mark.parametrize(("overrides", "manager", "n"), [
    ([], "SingleReplicaManager", 1),
    (["serving.n_replicas=2", "serving.scheduler.enabled=true"], "PoolManager", 2),
])
async def test_runtime_serves_through_the_configured_manager(tiny_llama_dir, tmp_path, overrides, manager, n):
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "serving.kv_budget_tokens=4096", *overrides])
    rt = await InProcessRuntime.start(cfg, RunDir(tmp_path, "r"))
    try:
        assert rt.server is not None
        assert type(rt.server.manager).__name__ == manager and len(rt.engines) == n
        session = rt.server.proxy.open_session()
        client = openai.AsyncOpenAI(base_url=session.openai_base_url, api_key="x")
        out = await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert out.choices[0].message.content is not None
        record = await rt.server.proxy.close_session(session.id)
        assert sum(record.mask) >= 1
        await client.close()
    finally:
        await rt.close()
