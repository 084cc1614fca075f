"""Run pytest for grading, hardened against a workdir that tries to steer its own grading.

Usage: python3 run_pytest.py CONFIG.json [--clean-only] [PYTEST ARGS...], from the workdir.
- pytest and the outcome plugin are imported before the workdir is on sys.path, so a planted
  `pytest.py` or `legorl_outcomes.py` cannot replace them (plain `python3 -m pytest` would run one);
- conftest.py files the task did not ship are deleted (test.sh restores the shipped ones), and
  stale __pycache__ dirs are removed so only current sources run.
Standard library + the system pytest only.
"""

import json
import os
import shutil
import sys

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
    return int(pytest.main(argv[2:], plugins=[legorl_outcomes]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
