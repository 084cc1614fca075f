"""`legorl eval` / `legorl infer` with model-free scaffolds (oracle scores 1, nop 0) and bad args."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks import read_index

runner = CliRunner()
TWO = ["builtin:shell-basics", "--task", "rename-file", "--task", "make-dir"]


def test_eval_oracle_and_nop(tmp_path):
    res = runner.invoke(app, ["eval", *TWO, "--agent", "oracle", "-k", "2", "--output", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "pass@1 = 1.0000" in res.output and "pass@2 = 1.0000" in res.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["pass@1"] == 1.0 and data["num_trials"] == 4 and len(data["trials"]) == 4
    t = data["trials"][0]
    assert {"task_id", "attempt", "reward", "outcome", "reason", "turns", "tokens", "duration_s"} <= set(t)
    assert sorted((t["task_id"], t["attempt"]) for t in data["trials"]) == [
        ("make-dir", 0), ("make-dir", 1), ("rename-file", 0), ("rename-file", 1)]
    assert (tmp_path / "trials" / "eval" / "step_0").is_dir()
    res = runner.invoke(app, ["eval", *TWO, "--agent", "nop"])
    assert res.exit_code == 0 and "pass@1 = 0.0000" in res.output


def test_eval_bad_args_exit_2(tmp_path):
    for args in (["eval", str(tmp_path / "missing")], ["eval", *TWO, "--agent", "nosuch"],
                 ["eval", *TWO, "-k", "0"], ["eval", *TWO, "--model", str(tmp_path / "nomodel")], ["infer", *TWO, "--band", "5..1", "-o", str(tmp_path / "x.parquet")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert len(res.output.strip().splitlines()) == 1, res.output


def test_eval_unrunnable_task_is_env_setup_failed(tmp_path):
    from legorl.tasks.builtin_sets import builtin_path

    tasks = tmp_path / "tasks"
    for name in ("rename-file", "make-dir"):
        shutil.copytree(builtin_path("shell-basics") / name, tasks / name)
    # a multi-stage Dockerfile: the local backend refuses it; the other task must still run
    (tasks / "make-dir" / "environment" / "Dockerfile").write_text("FROM a AS b\nFROM ubuntu:24.04\n")
    res = runner.invoke(app, ["eval", str(tasks), "--agent", "oracle", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    by_task = {t["task_id"]: t for t in data["trials"]}
    assert by_task["rename-file"]["outcome"] == "solved"
    assert by_task["make-dir"]["outcome"] == "env_setup_failed" and "multi-stage" in by_task["make-dir"]["reason"]


def test_infer_band_writes_index(tmp_path):
    out = tmp_path / "kept.parquet"
    res = runner.invoke(app, ["infer", *TWO, "--agent", "oracle", "-n", "2", "--band", "1..N", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(e.instance_id for e in read_index(out)) == ["make-dir", "rename-file"]
    res = runner.invoke(app, ["infer", *TWO, "--agent", "oracle", "-n", "2", "-o", str(out)])  # 1..N-1
    assert res.exit_code == 0 and "kept 0/2" in res.output and read_index(out) == []


async def test_evaluate_against_a_base_url(engine, tokenizer):
    """`--base-url`: any OpenAI-compatible server (here the proxy's bare routes); no tokens captured."""
    from legorl.agents.base import ScaffoldLimits
    from legorl.proxy import ProxyConfig, ProxyServer
    from legorl.serving.manager import SingleReplicaManager
    from legorl.tasks import load_tasks
    from legorl.workers import WorkerConfig
    from legorl.workers.evaluation import PolicySpec, evaluate

    server = ProxyServer(SingleReplicaManager(engine, engine.max_model_len), tokenizer, ProxyConfig(bare_routes=True))
    await server.start()
    try:
        tasks = [t for t in load_tasks("builtin:shell-basics") if t.id == "make-dir"]
        cfg = WorkerConfig(limits=ScaffoldLimits(max_turns=2, max_tokens_per_call=8))
        report = await evaluate(tasks, 2, cfg, PolicySpec(base_url=server.url))  # model name from /v1/models
    finally:
        await server.close()
    assert [r.outcome for r in report.results] == ["failed", "failed"], [r.reason for r in report.results]
    assert all(r.tokens is None and r.turns == 2 for r in report.results)
