"""The single-policy commands on vLLM: `legorl serve --engine vllm` answered through the official
`openai` client with exact token capture, and `legorl eval --engine vllm` scoring real trials.
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.proxy.cli import run_server

pytestmark = pytest.mark.slow


async def test_serve_with_vllm_captures_tokens_for_the_openai_client(vllm_executable, smollm_dir, tmp_path):
    import openai

    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(str(smollm_dir), trajectories=tmp_path, ready=ready, stop=stop,
                                          engine_kind="vllm"))
    url = await asyncio.wait_for(ready, 300)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x")
    try:
        reply = await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "Say hi"}], max_tokens=8, temperature=0)
        assert reply.choices[0].message.content is not None and reply.usage.completion_tokens >= 1
    finally:
        await client.close()
        stop.set()
        await asyncio.wait_for(task, 120)
    records = list(tmp_path.glob("*/proxy_trajectory.json"))
    branch = json.loads(records[0].read_text())["branches"][0]
    policy = [lp for lp, m in zip(branch["logprobs"], branch["mask"], strict=True) if m]
    assert len(policy) == reply.usage.completion_tokens and all(lp <= 0 for lp in policy)


def test_eval_with_vllm(vllm_executable, tmp_path):
    res = CliRunner().invoke(app, [
        "eval", "builtin:shell-basics", "--task", "rename-file", "--task", "make-dir", "--engine", "vllm",
        "-m", "smollm2-135m-instruct", "-k", "2", "--max-turns", "1", "--max-tokens", "24", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["num_trials"] == 4
    assert all(t["outcome"] in ("solved", "failed") and t["tokens"] > 0 for t in data["trials"])
