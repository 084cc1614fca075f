"""The package's own files must all be tracked: a file that .gitignore hides works here and is missing
from a fresh clone (a built-in task once lost its `build/README.txt` that way and failed only in CI)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_no_package_file_is_ignored_by_git():
    out = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "src", "scripts", "examples"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    hidden = [f for f in out if "__pycache__" not in f and ".egg-info/" not in f and not f.endswith(".pyc")]
    assert hidden == [], f"these files are ignored by .gitignore and would be missing from a clone: {hidden}"
