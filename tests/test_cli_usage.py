"""Usage errors of the `legorl` command are one line on stderr with exit code 2 (not click's box)."""

from __future__ import annotations

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
