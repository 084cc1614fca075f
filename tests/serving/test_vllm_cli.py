"""The single-policy commands on vLLM: `legorl eval` scoring real trials, and `legorl serve --engine vllm`
answered through the official `openai` client with exact token capture, both over the SmolLM2 server this
directory's vLLM files share (conftest.py), attached as a run config attaches servers.
Needs .venv-vllm from `bash scripts/setup.sh` (skipped without it, except under LEGORL_REQUIRE_VLLM=1)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from legorl.cli import app

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


def _requests_served(url: str) -> int:
    """The server's finished requests (`vllm:request_success_total`, as legorl's metrics reader sums it)."""
    import urllib.request

    from legorl.serving.vllm.metrics import VLLMMetrics

    return VLLMMetrics.parse(urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()).requests_finished


async def test_serve_with_vllm_captures_tokens_for_the_openai_client(smollm_vllm_server, smollm_dir, tmp_path):
    """`legorl serve --engine vllm --config RUN.toml` whose `serving.vllm.urls` names the shared server (as a user
    points it at servers they started): the official OpenAI client gets its chat completion and the session's
    trajectory holds exactly the completion's tokens, each with a logprob; SIGTERM ends the command and the
    attached server keeps running. That legorl starts a server itself is proven by the training test
    (tests/train/test_vllm_train.py)."""
    import os
    import subprocess
    import sys

    import openai

    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[serving]\nengine = "vllm"\n[serving.vllm]\nurls = ["{smollm_vllm_server.url}"]\n')
    served = _requests_served(smollm_vllm_server.url)
    proc = subprocess.Popen([sys.executable, "-m", "legorl.cli", "serve", "--model", str(smollm_dir), "--engine",
                             "vllm", "--config", str(cfg), "--trajectories", str(tmp_path / "traj")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        first = proc.stdout.readline()
        assert "legorl serve: model" in first, first + proc.stderr.read()[-3000:]
        url = first.split(" on ")[1].strip()
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x")
        try:
            reply = await client.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": "Say hi"}], max_tokens=8, temperature=0)
            assert reply.choices[0].message.content is not None and reply.usage.completion_tokens >= 1
        finally:
            await client.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert _requests_served(smollm_vllm_server.url) - served >= 1  # the attached server answered
    assert smollm_vllm_server.alive  # and outlives the command
    records = list((tmp_path / "traj").glob("*/proxy_trajectory.json"))
    branch = json.loads(records[0].read_text())["branches"][0]
    policy = [lp for lp, m in zip(branch["logprobs"], branch["mask"], strict=True) if m]
    assert len(policy) == reply.usage.completion_tokens and all(lp <= 0 for lp in policy)
