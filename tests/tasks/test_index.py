"""Parquet index round-trip, deterministic splits, and the `legorl tasks` commands."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.tasks.index import build_index, load_index_tasks, parse_split, read_index, split_tasks
from legorl.tasks.loader import TaskValidationError, load_tasks

from .test_loader import make_task

runner = CliRunner()


@dataclass(frozen=True)
class Fake:
    id: str


def test_index_round_trip(tmp_path):
    for name in ("a", "b", "c"):
        make_task(tmp_path / "set", name)
    tasks = load_tasks(tmp_path / "set", source="mine")
    out = tmp_path / "idx.parquet"
    entries = build_index(tasks, out)
    rows = read_index(out)
    assert rows == entries
    assert [(r.instance_id, r.source, r.split) for r in rows] == [(i, "mine", "train") for i in "abc"]
    assert [t.id for t in load_index_tasks(out)] == ["a", "b", "c"]
    assert [t.id for t in load_tasks(out)] == ["a", "b", "c"]


def test_index_paths_relative_and_movable(tmp_path):
    make_task(tmp_path / "data/tasks", "a")
    build_index(load_tasks(tmp_path / "data/tasks"), tmp_path / "data/idx.parquet")
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "data/idx.parquet").column("path").to_pylist() == ["tasks/a"]
    shutil.move(tmp_path / "data", tmp_path / "moved")
    assert load_tasks(tmp_path / "moved/idx.parquet")[0].path == (tmp_path / "moved/tasks/a").resolve()


def test_index_reports_broken_pointers(tmp_path):
    make_task(tmp_path / "set", "a")
    out = tmp_path / "idx.parquet"
    build_index(load_tasks(tmp_path / "set"), out)
    (tmp_path / "set/a/instruction.md").unlink()
    with pytest.raises(TaskValidationError, match=r"instruction\.md: missing"):
        load_tasks(out)


def test_duplicate_ids_refused(tmp_path):
    make_task(tmp_path / "x", "a")
    make_task(tmp_path / "y", "a")
    with pytest.raises(ValueError, match="duplicate task ids"):
        build_index(load_tasks(tmp_path / "x") + load_tasks(tmp_path / "y"), tmp_path / "i.parquet")


def test_split_deterministic_and_order_free():
    tasks = [Fake(f"t{i}") for i in range(50)]
    train, val = split_tasks(tasks, 0.2, seed=0)
    assert len(val) == 10 and len(train) == 40 and not {t.id for t in train} & {t.id for t in val}
    assert split_tasks(tasks, 0.2, seed=0) == (train, val)
    _, val_rev = split_tasks(list(reversed(tasks)), 0.2, seed=0)
    assert {t.id for t in val_rev} == {t.id for t in val}
    _, val_other = split_tasks(tasks, 0.2, seed=1)
    assert {t.id for t in val_other} != {t.id for t in val}
    assert split_tasks(tasks, 0.0) == (tasks, [])
    assert len(split_tasks(tasks[:3], 0.1)[1]) == 1  # a non-zero fraction always holds out one
    with pytest.raises(ValueError):
        split_tasks(tasks, 1.0)


def test_stratified_split_holds_out_every_kind():
    """tasks.stratify_by: each metadata value split on its own; a random quarter of this set misses kinds."""
    from collections import Counter

    from legorl.config.trials import TasksSection
    from legorl.tasks.split import load_task_split

    plain = load_task_split(TasksSection(train="builtin:shell-multistep", val_fraction=0.25))
    train, val = load_task_split(TasksSection(train="builtin:shell-multistep", val_fraction=0.25,
                                              stratify_by="kind"))
    kinds = Counter(t.metadata["kind"] for t in train + val)
    assert set(Counter(t.metadata["kind"] for t in plain[1])) < set(kinds)  # why it exists
    held = Counter(t.metadata["kind"] for t in val)
    assert held == {k: len(split_tasks([Fake(str(i)) for i in range(n)], 0.25)[1]) for k, n in kinds.items()}
    assert not {t.id for t in train} & {t.id for t in val} and len(train) + len(val) == sum(kinds.values())
    again = load_task_split(TasksSection(train="builtin:shell-multistep", val_fraction=0.25, stratify_by="kind"))
    assert again == (train, val)
    other = load_task_split(TasksSection(train="builtin:shell-multistep", val_fraction=0.25, stratify_by="kind",
                                         split_seed=1))
    assert {t.id for t in other[1]} != {t.id for t in val}


def test_parse_split():
    assert parse_split("val=0.25") == 0.25 and parse_split("0.1") == 0.1
    with pytest.raises(ValueError):
        parse_split("test=0.2")


def test_cli_index_list_validate(tmp_path):
    for name in ("a", "b", "c", "d", "e"):
        make_task(tmp_path / "set", name)
    out = tmp_path / "idx.parquet"
    r = runner.invoke(app, ["tasks", "index", str(tmp_path / "set"), "-o", str(out), "--split", "val=0.4"])
    assert r.exit_code == 0, r.output
    assert "5 task(s) (3 train, 2 val)" in r.output
    assert sum(e.split == "val" for e in read_index(out)) == 2
    r = runner.invoke(app, ["tasks", "list", str(out)])
    assert r.exit_code == 0 and "5 task(s)" in r.output and "val" in r.output
    r = runner.invoke(app, ["tasks", "list", str(out), "--split", "val"])
    assert "2 task(s)" in r.output
    r = runner.invoke(app, ["tasks", "validate", str(tmp_path / "set")])
    assert r.exit_code == 0 and "ok: 5 valid task(s)" in r.output


def test_cli_validate_bad_exit_2(tmp_path):
    make_task(tmp_path / "set", "good")
    bad = make_task(tmp_path / "set", "bad", toml="[agent]\ntimeout = 1\n", instruction=None)
    r = runner.invoke(app, ["tasks", "validate", str(tmp_path / "set")])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert f"WARN {bad}/task.toml: unknown key [agent].timeout (did you mean timeout_sec?)" in lines
    assert f"{bad}/instruction.md: missing (the agent's task text)" in lines
    assert "1 problem(s) in 1 task(s); 1 valid task(s); 1 warning(s)" in r.output


def test_cli_builtin_listing():
    r = runner.invoke(app, ["tasks", "builtin"])
    assert r.exit_code == 0 and "builtin:shell-basics" in r.output and "builtin:py-bugfix" in r.output
    r = runner.invoke(app, ["tasks", "validate", "builtin:shell-basics", "builtin:py-bugfix"])
    assert r.exit_code == 0, r.output
