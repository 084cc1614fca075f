"""`legorl preflight | doctor | status | dashboard` from the command line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from legorl.cli import app

from .rundir import base_record, make_run, trial

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_preflight_exit_codes(tmp_path):
    demo = str(ROOT / "examples" / "demo.toml")
    res = runner.invoke(app, ["preflight", demo, "--structure-only"])
    assert res.exit_code == 0, res.output
    assert "✓ [batch]" in res.output and "⊘ SKIP [sandbox]" in res.output and "ok to start" in res.output
    res = runner.invoke(app, ["preflight", demo, "algorithm.n_resp_per_prompt=1", "--structure-only"])
    assert res.exit_code == 1 and "✗ FATAL [batch]" in res.output
    res = runner.invoke(app, ["preflight", str(tmp_path / "missing.toml")])
    assert res.exit_code == 1 and "no such config file" in res.output


def test_doctor_and_status(tmp_path):
    healthy = make_run(tmp_path, "ok", steps=3)
    res = runner.invoke(app, ["doctor", str(healthy)])
    assert res.exit_code == 0 and "no known failure signature" in res.output
    bad = make_run(tmp_path, "bad", trials=[trial(1, "step_1-000-0", "t", "env_setup_failed", None)])
    res = runner.invoke(app, ["doctor", str(bad)])
    assert res.exit_code == 1 and "every trial env_setup_failed" in res.output and "fix:" in res.output
    res = runner.invoke(app, ["status", str(healthy)])
    assert res.exit_code == 0, res.output
    assert "alive" in res.output and "step 3/10" in res.output and "ETA" in res.output
    assert "critic/score/mean: 0.5" in res.output and "trials so far: 12 (solved 6, failed 6)" in res.output
    assert runner.invoke(app, ["status", str(tmp_path / "nothing")]).exit_code != 0
    estimated = make_run(tmp_path, "est", records=[{"step": 1, **base_record(1), "timing/run_estimate_s": 840.0}])
    res = runner.invoke(app, ["status", str(estimated)])
    assert "(estimated after the first step: 14m00s in all)" in res.output, res.output


def test_run_estimate_after_the_first_step():
    """10 steps, validation every 5: after step 1 the rest is 9
    steps at its pace and the 2 validations still due (steps 5 and 10) at the step-0 validation's 30 s."""
    from legorl.config import RunConfig
    from legorl.train.steps import run_estimate

    cfg = RunConfig.model_validate({"trainer": {"total_steps": 10, "test_freq": 5}})
    total, line = run_estimate(cfg, 1, {"timing/step_s": 50.0}, elapsed_s=120.0, val_s=30.0)
    assert total == 120.0 + 9 * 50.0 + 2 * 30.0
    assert line.startswith("estimate: the whole run takes ~10.5 min") and "9 more steps x 50 s" in line


def test_status_finished_run_is_not_alive(tmp_path):
    run = make_run(tmp_path, records=[{"step": s, **base_record(s)} for s in range(1, 11)], trials=[])
    res = runner.invoke(app, ["status", str(run)])
    assert "not running" in res.output and "step 10/10" in res.output and "ETA" not in res.output


def test_dashboard_command_serves(tmp_path):
    make_run(tmp_path, "exp", steps=2)
    proc = subprocess.Popen([sys.executable, "-m", "legorl.cli", "dashboard", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        with urllib.request.urlopen(url.group(0) + "api/runs", timeout=10) as r:
            assert [row["name"] for row in json.load(r)] == ["exp"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_alive_by_process(tmp_path):
    """Old files but a `legorl train` process whose cwd/output_dir/name is the run: alive."""
    from legorl.ops.runs import Run, is_alive, train_pids

    run = make_run(tmp_path / "runs", "exp", steps=2)
    old = 1_000_000_000
    for p in run.rglob("*"):
        os.utime(p, (old, old))
    assert not is_alive(Run(run))[0]
    fake = tmp_path / "legorl"
    fake.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(fake), "train", "cfg.toml"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        while not train_pids(Run(run)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert train_pids(Run(run)) == [proc.pid]
        assert is_alive(Run(run))[0]
    finally:
        proc.kill()
        proc.wait()
