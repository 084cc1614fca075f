"""SWE-bench-style converter: the generated verifier really grades (run under bubblewrap)."""

from __future__ import annotations

import difflib
import json
import shutil

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks.convert import ConversionError, apply_patch, convert_file, convert_records
from legorl.tasks.loader import load_task

from .conftest import bwrap_run, needs_bwrap

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
VISIBLE_TESTS = "from calc.core import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
HIDDEN_TESTS = VISIBLE_TESTS + (
    "\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "import pytest\n\n\n@pytest.mark.parametrize('x', [1, 2])\ndef test_add_zero(x):\n    assert add(x, 0) == x\n"
)


def diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def record(**over) -> dict:
    rec = {
        "instance_id": "calc-1",
        "repo": "example/calc",
        "snapshot": {"calc/__init__.py": "", "calc/core.py": BUGGY, "tests/test_core.py": VISIBLE_TESTS},
        "problem_statement": "add() subtracts instead of adding.",
        "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_add", "tests/test_core.py::test_add_zero[2]"]),
        "PASS_TO_PASS": ["tests/test_core.py::test_mul"],
        "test_patch": {"tests/test_core.py": HIDDEN_TESTS},
        "patch": diff("calc/core.py", BUGGY, FIXED),
    }
    rec.update(over)
    return rec


def convert_one(tmp_path, **over):
    [task_dir] = convert_records([record(**over)], tmp_path / "out")
    return task_dir


def test_task_layout(tmp_path):
    d = convert_one(tmp_path, snapshot={**record()["snapshot"], "my docs/a.txt": "x\n"})
    assert 'COPY ["my docs/", "/app/my docs/"]' in (d / "environment/Dockerfile").read_text()
    t = load_task(d)
    assert t.id == "calc-1" and t.metadata["repo"] == "example/calc" and t.metadata["fail_to_pass"] == 2
    assert "add() subtracts" in t.instruction and t.has_solution
    assert (d / "environment/calc/core.py").read_text() == BUGGY
    assert (d / "tests/files/tests/test_core.py").read_text() == HIDDEN_TESTS
    assert "COPY calc/ /app/calc/" in (d / "environment/Dockerfile").read_text()
    cfg = json.loads((d / "tests/config.json").read_text())
    assert cfg["fail_to_pass"][1] == "tests/test_core.py::test_add_zero[2]"


@needs_bwrap
@pytest.mark.parametrize("gold", ["diff", "dict"])
def test_gold_passes_noop_fails(tmp_path, gold):
    patch = diff("calc/core.py", BUGGY, FIXED) if gold == "diff" else {"calc/core.py": FIXED}
    d = convert_one(tmp_path, patch=patch)
    assert bwrap_run(d, tmp_path / "noop") == 0.0
    report = json.loads((tmp_path / "noop/logs/report.json").read_text())
    assert report["fail_to_pass"]["tests/test_core.py::test_add"] == "failed"
    assert report["pass_to_pass"]["tests/test_core.py::test_mul"] == "passed"
    assert bwrap_run(d, tmp_path / "oracle", oracle=True) == 1.0


@needs_bwrap
def test_patch_breaking_pass_to_pass_scores_zero(tmp_path):
    broken = FIXED.replace("a * b", "a ** b")
    d = convert_one(tmp_path, patch={"calc/core.py": broken})
    assert bwrap_run(d, tmp_path / "w", oracle=True) == 0.0
    report = json.loads((tmp_path / "w/logs/report.json").read_text())
    assert report["fail_to_pass"]["tests/test_core.py::test_add"] == "passed"
    assert report["pass_to_pass"]["tests/test_core.py::test_mul"] == "failed"


@needs_bwrap
def test_missing_test_id_and_agent_edited_tests(tmp_path):
    """A listed test that never ran counts as failed; agent edits to graded test files are undone."""
    d = convert_one(tmp_path, PASS_TO_PASS=["tests/test_core.py::test_mul", "tests/test_core.py::test_gone"])
    assert bwrap_run(d, tmp_path / "w", oracle=True) == 0.0
    assert json.loads((tmp_path / "w/logs/report.json").read_text())["pass_to_pass"][
        "tests/test_core.py::test_gone"] == "missing"
    d2 = convert_records([record(instance_id="calc-2", patch={"tests/test_core.py": "def test_add(): pass\n"})],
                         tmp_path / "out2")[0]
    assert bwrap_run(d2, tmp_path / "w2", oracle=True) == 0.0  # "fixing" the tests does not count


@needs_bwrap
def test_snapshot_directory_and_files_without_newline(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/__init__.py").write_text("")
    (repo / "pkg/m.py").write_text("X = 1")  # no trailing newline: oracle must write it exactly
    (repo / "test_m.py").write_text("from pkg.m import X\n\n\ndef test_x():\n    assert X == 2\n")
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__/junk.pyc").write_bytes(b"\0")
    records = tmp_path / "records.jsonl"
    rec = {"instance_id": "dir-1", "snapshot": "repo", "problem_statement": "X should be 2",
           "FAIL_TO_PASS": ["test_m.py::test_x"], "patch": {"pkg/m.py": "X = 2"}}
    records.write_text(json.dumps(rec) + "\n")
    [d] = convert_file(records, tmp_path / "out")
    assert not (d / "environment/__pycache__").exists()
    assert "base64 -d" in (d / "solution/solve.sh").read_text()
    assert bwrap_run(d, tmp_path / "n") == 0.0
    assert bwrap_run(d, tmp_path / "o", oracle=True) == 1.0
    assert (tmp_path / "o/app/pkg/m.py").read_text() == "X = 2"


def test_apply_patch_diff_and_delete():
    files = {"a.py": b"x = 1\n", "b.py": b"y = 2\n"}
    patch = diff("a.py", "x = 1\n", "x = 3\n") + "diff --git a/b.py b/b.py\ndeleted file mode 100644\n" + diff(
        "b.py", "y = 2\n", "").replace("+++ b/b.py", "+++ /dev/null")
    assert apply_patch(files, patch) == {"a.py": b"x = 3\n", "b.py": None}


def test_bad_records_all_reported(tmp_path):
    bad = [
        {"instance_id": "x"},
        record(instance_id="y", FAIL_TO_PASS=["not-a-node-id"]),
        record(instance_id="z", patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"),
        record(instance_id="w", FAIL_TO_PASS=[]),
        record(instance_id="v", snapshot={"../escape.py": "x"}),
        record(instance_id="u", patch={"calc/core.py": 5}),
        record(instance_id="s", patch="diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n"
                                      "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"),
    ]
    with pytest.raises(ConversionError) as exc:
        convert_records(bad, tmp_path / "out")
    msg = str(exc.value)
    assert "7 bad record(s)" in msg
    assert "record 1 (x): missing field snapshot; missing field problem_statement; missing field fail_to_pass" in msg
    assert "record 2 (y): FAIL_TO_PASS: FAIL_TO_PASS must be a list of pytest node ids" in msg
    assert "record 3 (z): patch: patch does not apply" in msg
    assert "record 4 (w): FAIL_TO_PASS is empty" in msg
    assert "record 5 (v): snapshot: bad file path '../escape.py'" in msg
    assert "record 6 (u): patch: content of 'calc/core.py' must be text, got int" in msg
    assert "record 7 (s): patch: patch creates symlinks, which tasks cannot carry: l" in msg
    assert not (tmp_path / "out").exists()  # nothing written when any record is bad


def test_existing_dir_needs_overwrite(tmp_path):
    convert_one(tmp_path)
    with pytest.raises(ConversionError, match="exists"):
        convert_records([record()], tmp_path / "out")
    assert convert_records([record()], tmp_path / "out", overwrite=True)


def test_cli_convert(tmp_path):
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps(record()) + "\n\n" + json.dumps(record(instance_id="calc-2")) + "\n")
    r = CliRunner().invoke(app, ["tasks", "convert", str(records), "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "wrote 2 task(s)" in r.output
    if shutil.which("bwrap"):  # --check runs oracle and no-op through legorl.env
        r = CliRunner().invoke(app, ["tasks", "convert", str(records), "-o", str(tmp_path / "out"),
                                     "--overwrite", "--check"])
        assert r.exit_code == 0 and "ok: 2 task(s) score 1 with the oracle and 0 untouched" in r.output, r.output
    as_list = tmp_path / "r.json"
    as_list.write_text(json.dumps([record(instance_id="calc-3")]))
    assert [d.name for d in convert_file(as_list, tmp_path / "out")] == ["calc-3"]
    records.write_text("{not json\n")
    r = CliRunner().invoke(app, ["tasks", "convert", str(records), "-o", str(tmp_path / "out2")])
    assert r.exit_code == 2 and "r.jsonl:1: invalid JSON" in r.output


CONFTEST_HACK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
FAKE_PLUGIN = """import json, os


def pytest_sessionfinish(session, exitstatus):
    ids = ["tests/test_core.py::test_add", "tests/test_core.py::test_add_zero[2]", "tests/test_core.py::test_mul"]
    with open(os.environ["LEGORL_OUTCOMES"], "w") as f:
        json.dump({"exitstatus": 0, "tests": {i: "passed" for i in ids}}, f)
"""


@needs_bwrap
@pytest.mark.parametrize("planted", ["conftest.py", "tests/conftest.py", "legorl_outcomes.py", "pytest.py"])
def test_planted_files_do_not_fool_grading(tmp_path, planted):
    content = {"pytest.py": "import sys\nsys.exit(0)\n", "legorl_outcomes.py": FAKE_PLUGIN}.get(planted, CONFTEST_HACK)
    d = convert_one(tmp_path, patch={planted: content})
    assert bwrap_run(d, tmp_path / "w", oracle=True) == 0.0
