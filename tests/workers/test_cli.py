"""`legorl eval` / `legorl infer` with model-free scaffolds (oracle scores 1, nop 0) and bad args."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks import read_index
from legorl.tasks.builtin_sets import builtin_path

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
    res = runner.invoke(app, ["eval", *TWO, "--agent", "nop", "-k", "3", "--no-progress"])
    assert res.exit_code == 0 and "pass@1 = 0.0000" in res.output
    lines = [x for x in res.output.splitlines() if x.startswith("eval nop: ")]  # a plain line per tenth, no bar
    assert [x.split(" (")[0] for x in lines] == [f"eval nop: {i}/6 trials, 0 solved" for i in range(1, 7)], lines


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


RUN = """
[run]
name = "r"
seed = 3
[model]
path = "{model}"
[tasks]
train = "builtin:shell-basics"
include = ["rename-file", "make-dir", "touch-done", "delete-file"]
val_fraction = 0.5
[rollout]
temperature = 0.3
max_turns = 2
max_response_len = 17
max_prompt_len = 900
concurrency = 3
[agent]
name = "builtin"
timeout_sec = 77
command_timeout_sec = 9
[agent.kwargs]
tools = false
system_prompt = "Be brief."
[serving]
kv_budget_tokens = 4096
dtype = "float32"
"""


def test_eval_config_takes_the_runs_settings_and_flags_override_them(tmp_path, tiny_llama_dir):
    """`--config` reads the scaffold, its kwargs, limits, concurrency, seed and serving of a run config;
    a flag given on the command line wins over it."""
    from legorl.config import load_config
    from legorl.workers.cli import Flags, _setup

    run = tmp_path / "run.toml"
    run.write_text(RUN.format(model=tiny_llama_dir))
    cfg, policy = _setup(Flags(), load_config(run), "eval")
    assert (cfg.scaffold, cfg.scaffold_kwargs["system_prompt"], cfg.agent_timeout_sec) == ("builtin", "Be brief.", 77)
    lim = cfg.limits
    assert (lim.temperature, lim.max_turns, lim.max_tokens_per_call, lim.command_timeout_sec) == (0.3, 2, 17, 9)
    assert cfg.max_trials == cfg.max_sandboxes == cfg.max_scaffolds == 3
    assert (policy.model, policy.seed, policy.kv_budget_tokens, policy.max_model_len) == (
        str(tiny_llama_dir), 3, 4096, 917)
    cfg, policy = _setup(Flags(temperature=0.9, max_turns=5, concurrency=2, seed=1, agent="oracle",
                               agent_opt=["x=1"]), load_config(run), "eval")
    assert (cfg.limits.temperature, cfg.limits.max_turns, cfg.max_trials, policy.seed) == (0.9, 5, 2, 1)
    assert cfg.scaffold == "oracle" and cfg.scaffold_kwargs == {"x": 1}  # another scaffold: not the run's kwargs
    # trainer.val_temperature: eval measures at it (as the run's validation), infer samples as the rollouts
    validated = load_config(run, ["trainer.val_temperature=0.6"])
    assert _setup(Flags(), validated, "eval")[0].limits.temperature == 0.6
    assert _setup(Flags(), validated, "infer")[0].limits.temperature == 0.3
    assert _setup(Flags(temperature=0.9), validated, "eval")[0].limits.temperature == 0.9
    # the run's replicas serve the evaluation too (thread replicas over one copy of the weights)
    assert policy.n_replicas == 1 and _setup(Flags(), load_config(run, ["serving.n_replicas=2"]), "eval")[1].n_replicas == 2
    assert policy.decode_attention == "auto"
    assert _setup(Flags(), load_config(run, ["serving.decode_attention=torch"]), "eval")[1].decode_attention == "torch"


def test_eval_config_runs_the_held_out_split(tmp_path, tiny_llama_dir):
    """No TASKS with `--config`: the run's held-out tasks (--split val), or its training tasks."""
    run = tmp_path / "run.toml"
    run.write_text(RUN.format(model=tiny_llama_dir))
    out = tmp_path / "out"
    res = runner.invoke(app, ["eval", "--config", str(run), "--agent", "oracle", "-o", str(out)])
    assert res.exit_code == 0, res.output
    from legorl.config import load_config
    from legorl.tasks.split import load_task_split

    _, val = load_task_split(load_config(run).tasks)
    ids = sorted(t["task_id"] for t in json.loads((out / "results.json").read_text())["trials"])
    assert ids == sorted(t.id for t in val) and len(ids) == 2 and "pass@1 = 1.0000" in res.output
    res = runner.invoke(app, ["eval", "--config", str(run), "--agent", "nop", "--split", "train"])
    assert res.exit_code == 0 and "2 task(s)" in res.output, res.output
    # -O: the run as trained with an override (here a smaller held-out share: 1 of the 4 tasks)
    res = runner.invoke(app, ["eval", "--config", str(run), "-O", "tasks.val_fraction=0.25", "--agent", "nop"])
    assert res.exit_code == 0 and "1 task(s)" in res.output, res.output
    for args, message in ((["eval"], "--config RUN.toml"), (["eval", "--config", str(tmp_path / "no.toml")], "--config"),
                          (["eval", "--config", str(run), "--split", "both"], "--split"),
                          (["eval", "-O", "tasks.val_fraction=0.25"], "give --config"),
                          (["eval", "--config", str(run), "-O", "tasks.val_fraction=2"], "val_fraction")):
        res = runner.invoke(app, args)
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and message in lines[0], (args, res.output)


def test_sandbox_min_memory_mb_raises_a_tasks_limit_from_the_run_config(tmp_path):
    """A task of 256 MB whose oracle allocates 1.5 GB: killed at its own limit (reward 0), solved once the run
    config's `sandbox.min_memory_mb = 2048` raises it (what an in-sandbox agent CLI needs on top of a task)."""
    src = Path(builtin_path("shell-basics")) / "append-line"
    task = tmp_path / "tasks" / "big-alloc"
    shutil.copytree(src, task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 512", "memory_mb = 256"))
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\npython3 -c \"b = bytearray(1536 * 2**20); open('/app/done', 'w').write('ok')\"\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n")
    res = runner.invoke(app, ["eval", str(task), "--agent", "oracle"])
    assert res.exit_code == 0 and "pass@1 = 0.0000" in res.output, res.output
    run = tmp_path / "run.toml"
    run.write_text("[sandbox]\nmin_memory_mb = 2048\n")
    res = runner.invoke(app, ["eval", str(task), "--agent", "oracle", "--config", str(run)])
    assert res.exit_code == 0 and "pass@1 = 1.0000" in res.output, res.output
