"""The single-policy commands on vLLM: `legorl eval --engine vllm` scoring real trials on a server it
starts, and `legorl serve --engine vllm` answered through the official `openai` client with exact token
capture, over the SmolLM2 server this directory's vLLM files share (conftest.py). Eval runs first: its own
server is stopped before the shared one starts, so two never hold memory at once.
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.proxy.cli import run_server

pytestmark = pytest.mark.slow


def test_eval_with_vllm(vllm_executable, tmp_path):
    """`legorl eval --engine vllm` starts a vLLM server itself (the CLI's launch path: the store's model
    resolved, the server started and stopped) and scores 2 tasks x k=2 real trials through it."""
    res = CliRunner().invoke(app, [
        "eval", "builtin:shell-basics", "--task", "rename-file", "--task", "make-dir", "--engine", "vllm",
        "-m", "smollm2-135m-instruct", "-k", "2", "--max-turns", "1", "--max-tokens", "24", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["num_trials"] == 4
    assert all(t["outcome"] in ("solved", "failed") and t["tokens"] > 0 for t in data["trials"])


async def test_serve_with_vllm_captures_tokens_for_the_openai_client(smollm_vllm_server, smollm_dir, tmp_path):
    """`legorl serve --engine vllm`'s server (`run_server`) over a vLLM replica: the official OpenAI client
    gets its chat completion and the session's trajectory holds exactly the completion's tokens, each with
    a logprob. The replica is the shared server (`serving.vllm.urls`, as a run config attaches one); that
    legorl starts a server is proven by the eval test above and the training test."""
    import openai

    from legorl.config.serving import VLLMSection

    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(str(smollm_dir), trajectories=tmp_path, ready=ready, stop=stop,
                                          engine_kind="vllm", vllm=VLLMSection(urls=[smollm_vllm_server.url])))
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
    assert smollm_vllm_server.alive  # an attached server outlives the command
    records = list(tmp_path.glob("*/proxy_trajectory.json"))
    branch = json.loads(records[0].read_text())["branches"][0]
    policy = [lp for lp, m in zip(branch["logprobs"], branch["mask"], strict=True) if m]
    assert len(policy) == reply.usage.completion_tokens and all(lp <= 0 for lp in policy)
