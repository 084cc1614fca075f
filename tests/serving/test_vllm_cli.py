"""The single-policy commands on vLLM: `legorl eval` scoring real trials, and `legorl serve --engine vllm`
answered through the official `openai` client with exact token capture, both over the SmolLM2 server this
directory's vLLM files share (conftest.py), attached as a run config attaches servers.
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.proxy.cli import run_server

pytestmark = pytest.mark.slow


def test_eval_with_vllm(smollm_vllm_server, smollm_dir, tmp_path):
    """`legorl eval --config RUN.toml` whose run serves on vLLM (`serving.engine = "vllm"`, the shared server
    attached by `serving.vllm.urls`, as a user points a run at servers they started) scores 2 tasks x k=2
    real trials through it, and leaves the attached server running. That legorl starts and stops a server
    itself is proven by tests/train/test_vllm_train.py (`legorl train`'s launch path, which eval shares)."""
    import tomli_w

    cfg = tmp_path / "run.toml"
    cfg.write_text(tomli_w.dumps({
        "model": {"path": str(smollm_dir)}, "tasks": {"train": "builtin:shell-basics"},
        "serving": {"engine": "vllm", "vllm": {"urls": [smollm_vllm_server.url]}},
    }))
    served = _requests_served(smollm_vllm_server.url)
    res = CliRunner().invoke(app, [
        "eval", "builtin:shell-basics", "--config", str(cfg), "--task", "rename-file", "--task", "make-dir",
        "-k", "2", "--max-turns", "1", "--max-tokens", "24", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["num_trials"] == 4
    assert all(t["outcome"] in ("solved", "failed") and t["tokens"] > 0 for t in data["trials"])
    # the attached server answered the trials' calls (until 2026-12-07 eval ignored `serving.vllm` and started a
    # server of its own), and it is still running
    assert _requests_served(smollm_vllm_server.url) - served >= 4
    assert smollm_vllm_server.alive


def _requests_served(url: str) -> float:
    """vLLM's `vllm:request_success_total`, summed over finish reasons."""
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


async def test_serve_with_vllm_captures_tokens_for_the_openai_client(smollm_vllm_server, smollm_dir, tmp_path):
    """`legorl serve --engine vllm`'s server (`run_server`) over a vLLM replica: the official OpenAI client
    gets its chat completion and the session's trajectory holds exactly the completion's tokens, each with
    a logprob. The replica is the shared server (`serving.vllm.urls`, as a run config attaches one); that
    legorl starts a server is proven by the training test (tests/train/test_vllm_train.py)."""
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
