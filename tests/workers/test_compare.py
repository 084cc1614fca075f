"""`legorl compare`: two real `legorl eval -o` outputs (oracle scores 1, nop 0) paired per task, and bad input."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.workers.compare import compare

runner = CliRunner()
TASKS = ["builtin:shell-basics", "--task", "rename-file", "--task", "make-dir"]


def test_compare_two_evaluations_from_the_cli(tmp_path):
    oracle, nop = tmp_path / "oracle", tmp_path / "nop"
    res = runner.invoke(app, ["eval", *TASKS, "--task", "append-line", "--agent", "oracle", "-o", str(oracle),
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", *TASKS, "--agent", "nop", "-k", "2", "-o", str(nop), "--no-progress"])
    assert res.exit_code == 0, res.output

    res = runner.invoke(app, ["compare", str(nop), str(oracle / "results.json"), "--group", "^([a-z]+)-"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines == [
        "all: 2 tasks, pass@1 0.000 -> 1.000, +100.0 (SE 0.0)",  # append-line is only in one: left out
        "make: 1 task, pass@1 0.000 -> 1.000, +100.0",
        "rename: 1 task, pass@1 0.000 -> 1.000, +100.0",
    ], res.output
    assert "1 task(s) are in only one" in res.stderr

    res = runner.invoke(app, ["compare", str(oracle), str(nop), "--json"])
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(x) for x in res.stdout.strip().splitlines()]
    assert row == {"name": "all", "n": 2, "before": 1.0, "after": 0.0, "gain": -1.0, "se": 0.0}


def test_the_gain_is_the_mean_per_task_difference_and_its_se():
    before = {"a-1": 0.5, "a-2": 0.0, "b-1": 1.0, "c": 0.25}
    after = {"a-1": 1.0, "a-2": 0.5, "b-1": 0.5, "c": 0.25, "d": 1.0}
    rows = {r.name: r for r in compare(before, after, group=r"^[a-z]-")}
    # differences 0.5, 0.5, -0.5, 0: mean 1/8; sample SD over sqrt(4)
    diffs = [0.5, 0.5, -0.5, 0.0]
    sd = math.sqrt(sum((d - 0.125) ** 2 for d in diffs) / 3)
    assert rows["all"].n == 4 and rows["all"].gain == pytest.approx(0.125)
    assert rows["all"].se == pytest.approx(sd / 2)
    assert rows["all"].before == pytest.approx(1.75 / 4) and rows["all"].after == pytest.approx(2.25 / 4)
    assert rows["a-"].n == 2 and rows["a-"].gain == pytest.approx(0.5) and rows["a-"].se == pytest.approx(0.0)
    assert rows["b-"].n == 1 and rows["b-"].se is None  # one task: no spread to measure
    assert rows["(other)"].n == 1  # "c" does not match the group expression


def test_compare_bad_input_is_one_line_and_exit_2(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"tasks": {"t": {"pass@1": 1.0}}}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"tasks": {"u": {"pass@1": 0.0}}}))
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    for args, says in (
        ([str(tmp_path / "missing"), str(good)], "no such file"),
        ([str(junk), str(good)], "not a results.json"),
        ([str(good), str(other)], "share no task id"),
        ([str(good), str(good), "--group", "("], "not a regular expression"),
    ):
        res = runner.invoke(app, ["compare", *args])
        assert res.exit_code == 2, (args, res.output)
        assert len(res.output.strip().splitlines()) == 1 and says in res.output, res.output
