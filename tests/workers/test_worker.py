"""AgentLoopWorker end to end: a scripted solve, failure injection, concurrency, artifacts."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import openai

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, register_scaffold
from legorl.tasks import load_task
from legorl.workers import AgentLoopWorker, ProxyEndpoints, TrialSpec, WorkerConfig, run_trials
from legorl.workers.filter import TrajectoryFilter

from .conftest import child_processes, replay_proxy
from .scripted import HANG, ReplayEngine

SOLVE = [
    'Renaming.\n<tool_call>\n{"name": "bash", "arguments": {"command": "mv /app/old.txt /app/new.txt"}}\n</tool_call>',
    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
]


def _cfg(root: Path, sandbox_root: Path, **kw) -> WorkerConfig:
    kw.setdefault("limits", ScaffoldLimits(max_turns=4, max_tokens_per_call=64, temperature=1.0))
    return WorkerConfig(output_root=root, sandbox_opts={"root_dir": sandbox_root}, exp_name="t", **kw)


async def test_scripted_policy_solves_through_tool_calls(tokenizer, shell_tasks, tmp_path, sandbox_root):
    server, _ = await replay_proxy(tokenizer, SOLVE)
    try:
        (res,) = await run_trials([TrialSpec(shell_tasks["rename-file"], attempt=2, group_id="g", step=5)],
                                  ProxyEndpoints(server), _cfg(tmp_path, sandbox_root))
    finally:
        await server.close()
    assert res.outcome == "solved" and res.reward == 1.0 and res.reason == ""
    assert res.metadata["exit_status"] == "submitted" and res.turns == 2
    ro = res.tokens
    assert ro is not None and ro.num_policy_tokens > 0
    assert (res.spec.attempt, res.group_id, res.task_id) == (2, "g", "rename-file")
    # the policy tokens are exactly the two scripted replies (+ end-of-turn each), behaviour logprobs kept
    policy = [t for t, m in zip(ro.token_ids, ro.response_mask, strict=True) if m]
    expected = [t for text in SOLVE for t in [*tokenizer(text, add_special_tokens=False)["input_ids"], 2]]
    assert policy == expected
    assert all(lp == ReplayEngine.LOGPROB for lp, m in zip(ro.logprobs, ro.response_mask, strict=True) if m)
    assert all(lp == 0.0 and v == -1 for lp, v, m in zip(ro.logprobs, ro.weight_versions, ro.response_mask,
                                                          strict=True) if not m)
    assert {v for v, m in zip(ro.weight_versions, ro.response_mask, strict=True) if m} == {3}
    # artifacts: trajectory from the proxy, scaffold log, verifier log, result.json
    d = Path(res.artifacts_dir)
    assert d == tmp_path / "trials" / "t" / "step_5" / res.spec.trial_id
    traj = json.loads((d / "proxy_trajectory.json").read_text())
    assert traj["branches"][0]["token_ids"] == ro.token_ids
    assert "mv /app/old.txt" in (d / "agent" / "builtin.log").read_text()
    assert "reward: 1.0" in (d / "verifier.log").read_text()
    assert json.loads((d / "result.json").read_text())["outcome"] == "solved"


async def test_text_protocol_and_done_rule(tokenizer, shell_tasks, tmp_path, sandbox_root):
    script = ["I will rename it.\n```bash\n#!/bin/bash\nsudo mv old.txt new.txt\n```", "The task is done."]
    server, _ = await replay_proxy(tokenizer, script)
    try:
        (res,) = await run_trials([TrialSpec(shell_tasks["rename-file"])], ProxyEndpoints(server),
                                  _cfg(tmp_path, sandbox_root))
    finally:
        await server.close()
    assert res.outcome == "solved", res.reason
    assert res.metadata["exit_status"] == "finished" and res.metadata["scaffold_text_actions"] == 1


async def test_nudges_then_no_action_limit(tokenizer, shell_tasks, tmp_path, sandbox_root):
    server, _ = await replay_proxy(tokenizer, ["hello", "I am thinking", "done"])
    try:
        (res,) = await run_trials([TrialSpec(shell_tasks["rename-file"])], ProxyEndpoints(server),
                                  _cfg(tmp_path, sandbox_root))
    finally:
        await server.close()
    # "done" without any command run is not a finish: three replies without action end the trial
    assert res.outcome == "failed" and res.reward == 0.0
    assert res.metadata["exit_status"] == "no_action_limit" and res.metadata["scaffold_nudges"] == 2
    msgs = json.loads((Path(res.artifacts_dir) / "agent" / "messages.json").read_text())
    assert sum("```bash" in m["content"] for m in msgs if m["role"] == "user") == 2


async def test_timeout_during_a_model_call_aborts_it(tokenizer, shell_tasks, tmp_path, sandbox_root):
    server, eng = await replay_proxy(tokenizer, ["```bash\necho hi\n```", HANG])
    try:
        cfg = _cfg(tmp_path, sandbox_root, agent_timeout_sec=1.0)
        (res,) = await run_trials([TrialSpec(shell_tasks["rename-file"])], ProxyEndpoints(server), cfg)
    finally:
        await server.close()
    assert res.outcome == "timeout" and res.reward == 0.0
    assert res.tokens is not None and res.tokens.num_policy_tokens > 0  # the first reply is kept
    assert not eng._aborts  # closing the session aborted the hung generation
    assert not server.sessions


class CrashScaffold:
    """One real model call, then a bug."""

    name = "test-crash"

    async def run(self, instruction, sandbox, endpoint, limits, log_dir) -> ScaffoldResult:
        async with openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key="x", max_retries=0) as c:
            await c.chat.completions.create(model="p", messages=[{"role": "user", "content": instruction}],
                                            max_tokens=8)
        raise RuntimeError("scaffold bug")


class HangScaffold:
    """One real model call, then a command that never ends (plus a background one)."""

    name = "test-hang"

    async def run(self, instruction, sandbox, endpoint, limits, log_dir) -> ScaffoldResult:
        async with openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key="x", max_retries=0) as c:
            await c.chat.completions.create(model="p", messages=[{"role": "user", "content": instruction}],
                                            max_tokens=8)
        await sandbox.exec("sleep 987 & sleep 986", timeout=1000)
        return ScaffoldResult("finished", 1)


register_scaffold("test-crash", f"{__name__}:CrashScaffold")
register_scaffold("test-hang", f"{__name__}:HangScaffold")


async def test_failure_injection(proxy, shell_tasks, tmp_path, sandbox_root, monkeypatch):
    task = shell_tasks["rename-file"]
    ends = ProxyEndpoints(proxy)
    # 1. the sandbox cannot start (no bubblewrap at that path): env_setup_failed, nothing else ran
    bad = WorkerConfig(sandbox_opts={"bwrap": "/nonexistent/bwrap", "root_dir": sandbox_root})
    (r,) = await run_trials([TrialSpec(task)], ends, bad)
    assert r.outcome == "env_setup_failed" and "bwrap" in r.reason and r.tokens is None and r.reward is None
    # 2. the scaffold crashes after a model call: agent_error, its tokens kept, still verified
    (r,) = await run_trials([TrialSpec(task)], ends, _cfg(tmp_path, sandbox_root, scaffold="test-crash"))
    assert r.outcome == "agent_error" and "scaffold bug" in r.reason and r.reward == 0.0
    assert r.tokens is not None and r.tokens.num_policy_tokens > 0
    assert "RuntimeError" in (Path(r.artifacts_dir) / "agent" / "error.txt").read_text()
    # 3. the scaffold hangs past the agent timeout: timeout, tokens kept, its processes killed
    cfg = _cfg(tmp_path, sandbox_root, scaffold="test-hang", agent_timeout_sec=1.5)
    (r,) = await run_trials([TrialSpec(task)], ends, cfg)
    assert r.outcome == "timeout" and r.reward == 0.0 and r.tokens and r.tokens.num_policy_tokens > 0
    assert 1.5 <= r.timings["agent"] < 10
    # 4. the verifier hangs (test.sh sleeps): verifier_error, reward None
    slow = tmp_path / "slow-task"
    shutil.copytree(task.path, slow)
    (slow / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 985\n")
    cfg = _cfg(tmp_path, sandbox_root, scaffold="nop", verifier_timeout_sec=1.0)
    (r,) = await run_trials([TrialSpec(load_task(slow))], ends, cfg)
    assert r.outcome == "verifier_error" and "timed out" in r.reason and r.reward is None
    # 5. verify itself never returns: abandoned after its timeout + grace
    async def stuck(*a, **k):
        await asyncio.sleep(3600)

    monkeypatch.setattr("legorl.workers.worker.verify", stuck)
    cfg = _cfg(tmp_path, sandbox_root, scaffold="nop", verifier_timeout_sec=0.5, grace_sec=0.5)
    (r,) = await run_trials([TrialSpec(task)], ends, cfg)
    assert r.outcome == "verifier_error" and "hung" in r.reason
    # nothing left: no child process, no sandbox dir (checked by the fixture), no open session
    assert not [c for c in child_processes() if "sleep 98" in c or "bwrap" in c]
    assert not proxy.sessions
    kept, stats = TrajectoryFilter()([r])
    assert kept == [] and stats.dropped["verifier_error"] == 1


async def test_context_overflow_outcome(engine, tokenizer, shell_tasks, tmp_path, sandbox_root):
    from legorl.proxy import ProxyConfig, ProxyServer
    from legorl.serving.manager import SingleReplicaManager

    # a 760-token window: the first call fits (prompt ~560 + 120), a later one does not
    server = ProxyServer(SingleReplicaManager(engine, 760), tokenizer, ProxyConfig())
    await server.start()
    try:
        limits = ScaffoldLimits(max_turns=6, max_tokens_per_call=120, temperature=1.0, max_no_action=6)
        (r,) = await run_trials([TrialSpec(shell_tasks["rename-file"])], ProxyEndpoints(server),
                                _cfg(tmp_path, sandbox_root, limits=limits))
    finally:
        await server.close()
    assert r.outcome == "context_overflow" and r.reward == 0.0
    assert r.metadata["exit_status"] == "context_overflow" and r.tokens is not None


async def test_sixteen_concurrent_trials(proxy, shell_tasks, tmp_path, sandbox_root, tiny_llama_dir):
    from legorl.env import make_sandbox

    live, peak = 0, 0

    def counting(task, **kw):
        sb = make_sandbox(task, **kw)
        start, stop = sb.start, sb.stop

        async def s():
            nonlocal live, peak
            await start()
            live += 1
            peak = max(peak, live)

        async def e():
            nonlocal live
            live -= 1
            await stop()

        sb.start, sb.stop = s, e
        return sb

    tasks = sorted(shell_tasks.values(), key=lambda t: t.id)[:8]
    specs = [TrialSpec(t, attempt=a) for t in tasks for a in range(2)]
    limits = ScaffoldLimits(max_turns=2, max_tokens_per_call=12, temperature=1.0)
    worker = AgentLoopWorker(_cfg(tmp_path, sandbox_root, limits=limits), ProxyEndpoints(proxy), counting)
    seen: list[str] = []
    results = await worker.run_trials(specs, on_result=lambda r: seen.append(r.spec.trial_id))
    assert len(results) == 16 and sorted(seen) == sorted(r.spec.trial_id for r in results)
    assert [r.spec.task.id for r in results] == [s.task.id for s in specs]  # input order
    assert all(r.outcome in ("failed", "solved") for r in results), [r.reason for r in results]
    rollouts = [r.tokens for r in results]
    assert all(ro is not None and ro.num_policy_tokens > 0 for ro in rollouts)
    assert len({r.trial_id for r in results}) == 16
    assert len({ro.capture["session_id"] for ro in rollouts}) == 16
    assert len({tuple(ro.token_ids) for ro in rollouts}) == 16
    assert peak > 1 and live == 0
    # behaviour logprobs equal a teacher-forced recompute on the same model
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    for ro in rollouts[:3]:
        with torch.no_grad():
            logits = hf(torch.tensor([ro.token_ids])).logits[0]
        lp = torch.log_softmax(logits[:-1] / 1.0, -1).gather(1, torch.tensor(ro.token_ids[1:])[:, None])[:, 0]
        diffs = [abs(lp[i - 1].item() - ro.logprobs[i]) for i, m in enumerate(ro.response_mask) if m]
        assert max(diffs) < 1e-4
