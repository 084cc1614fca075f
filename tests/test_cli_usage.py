"""Usage errors of the `legorl` command are one line on stderr with exit code 2 (not click's box)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("args, message", [
    (["train"], "Missing argument 'config'"),
    (["nosuch"], "No such command 'nosuch'"),
    (["eval", "builtin:shell-basics", "--bogus"], "No such option: --bogus"),
    (["eval", "builtin:shell-basics", "-k", "abc"], "Invalid value for '-k'"),
])
def test_usage_errors_are_one_line(args, message):
    res = subprocess.run([sys.executable, "-m", "legorl.cli", *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0] and "--help" in lines[0]


def test_help_still_works():
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "train", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and "--resume" in res.stdout


def test_eval_backend_is_a_name_or_module_class():
    """`--backend` takes what `sandbox.backend` takes: a registered name or an importable `module:Class`."""
    from typer.testing import CliRunner

    from legorl.cli import app
    from legorl.workers.cli import Flags, _setup

    cfg, _ = _setup(Flags(agent="nop", backend="legorl.env.local:LocalSandbox"), None, "eval")
    assert cfg.backend == "legorl.env.local:LocalSandbox"
    for backend, message in (("nowhere", "module:Class"), ("nosuch_module_xyz:Box", "nosuch_module_xyz")):
        res = CliRunner().invoke(app, ["eval", "builtin:shell-basics", "--agent", "nop", "--backend", backend])
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("--backend: ") and message in lines[0]


def test_models_list_names_each_model_and_where_it_was_prepared(tiny_llama_dir):
    res = subprocess.run([sys.executable, "-m", "legorl.cli", "models", "list"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") >= 3}
    assert {"smollm2-135m-instruct", "tiny-llama"} <= set(rows)
    assert str(tiny_llama_dir) in rows["tiny-llama"]  # prepared (the fixture did it): its directory is listed
