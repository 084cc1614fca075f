"""Run pytest for grading, hardened against a workdir that tries to steer its own grading.

Usage: python3 run_pytest.py CONFIG.json [--clean-only] [PYTEST ARGS...], from the workdir.
- pytest and the outcome plugin are imported before the workdir is on sys.path, so a planted
  `pytest.py` or `legorl_outcomes.py` cannot replace them (plain `python3 -m pytest` would run one);
- conftest.py files the task did not ship are deleted (test.sh restores the shipped ones), and
  stale __pycache__ dirs are removed so only current sources run.
- run with `python3 -I` (test.sh does): no user site-packages, no PYTHON* variables, no cwd on the
  path; plugins the agent installed do not autoload; `-c /dev/null` keeps pytest.ini / setup.cfg /
  pyproject.toml in the workdir from adding options (`addopts = -p <plugin>`);
- after pytest wrote the outcomes, the process ends with os._exit: an exit hook the code under test
  registered never runs, and (when test.sh is the sandbox's init, as in legorl's local backend)
  every helper process it started is killed first, so nothing rewrites the outcomes file.
Standard library + the system pytest only.
"""

import json
import os
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this script's dir out
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"

import legorl_outcomes
import pytest


def clean(config):
    allowed = set(config.get("conftests", []))
    for root, dirs, files in os.walk("."):
        if ".git" in dirs:
            dirs.remove(".git")
        if "__pycache__" in dirs:
            shutil.rmtree(os.path.join(root, "__pycache__"), ignore_errors=True)
            dirs.remove("__pycache__")
        for name in files:
            rel = os.path.normpath(os.path.join(root, name))
            if name == "conftest.py" and rel not in allowed:
                print(f"removed conftest.py the task does not ship: {rel}")
                os.remove(rel)


def main(argv):
    with open(argv[1], encoding="utf-8") as f:
        config = json.load(f)
    clean(config)
    if argv[2:3] == ["--clean-only"]:
        return 0
    sys.dont_write_bytecode = True
    sys.path[0] = os.getcwd()  # as `python3 -m pytest` would have it, minus this script's dir
    args = argv[2:]
    if "-c" not in args and not any(a.startswith("--config-file") for a in args):
        args = ["-c", os.devnull, *args]
    finish(int(pytest.main(args, plugins=[legorl_outcomes])))


def finish(code):
    """Ends now: no exit hook runs, no helper process of the code under test outlives pytest."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getppid() == 1:  # test.sh is the namespace's init: kill(-1) spares it and us
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
