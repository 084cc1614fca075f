"""Loader and validation: every kind of broken task dir gives a clear line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from legorl.tasks.loader import TaskValidationError, find_task_dirs, load_task, load_tasks, validate_task

GOOD_TOML = """\
schema_version = "1.4"

[metadata]
difficulty = "easy"
tags = ["shell"]

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120

[environment]
build_timeout_sec = 300.0
cpus = 2
memory_mb = 1024
storage_mb = 4096
allow_internet = true
workdir = "/work"
"""


def make_task(root: Path, name: str = "t1", toml: str | None = GOOD_TOML, instruction: str | None = "Do it.\n",
              env: bool = True, test_sh: str | None = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
              solve: str | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if toml is not None:
        (d / "task.toml").write_text(toml)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    if env:
        (d / "environment").mkdir()
        (d / "environment/Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    if test_sh is not None:
        (d / "tests").mkdir()
        (d / "tests/test.sh").write_text(test_sh)
    if solve is not None:
        (d / "solution").mkdir()
        (d / "solution/solve.sh").write_text(solve)
    return d


def problems(d: Path) -> list[str]:
    return [str(p) for p in validate_task(d)]


def test_good_task_fields(tmp_path):
    t = load_task(make_task(tmp_path, solve="true\n"))
    assert t.id == "t1" and t.instruction == "Do it.\n" and t.workdir == "/work"
    assert (t.agent_timeout_sec, t.verifier_timeout_sec, t.build_timeout_sec) == (120.0, 30.0, 300.0)
    assert (t.limits.cpus, t.limits.memory_mb, t.limits.storage_mb, t.limits.allow_internet) == (2.0, 1024, 4096, True)
    assert t.metadata["tags"] == ["shell"] and t.has_solution and t.tests_dir.name == "tests"


def test_minimal_task_uses_defaults(tmp_path):
    t = load_task(make_task(tmp_path, toml=""))
    assert t.workdir == "/app" and t.agent_timeout_sec == 600.0 and not t.limits.allow_internet
    assert not t.has_solution


def test_harbor_style_fields_load(tmp_path):
    """Older/other Harbor keys (version, memory strings, env tables, MCP servers) load unmodified."""
    toml = """\
version = "1.0"
[metadata]
author_name = "someone"
[verifier]
timeout_sec = 120.0
env = { FOO = "bar" }
[agent]
timeout_sec = 300.0
[environment]
memory = "2G"
storage = "10G"
gpus = 0
[solution]
env = {}
[[environment.mcp_servers]]
name = "srv"
transport = "stdio"
"""
    t = load_task(make_task(tmp_path, toml=toml))
    assert t.limits.memory_mb == 2048 and t.limits.storage_mb == 10240 and t.limits.gpus == 0
    assert t.verifier_env == {"FOO": "bar"} and t.solution_env == {}
    assert problems(make_task(tmp_path, "t2", toml="[verifier]\nenv = { N = 1 }\n")) == [
        "task.toml: [verifier].env values must be strings, got integer for N"]


def test_metadata_id(tmp_path):
    toml = '[metadata]\ninstance_id = "org__repo-12"\n'
    assert load_task(make_task(tmp_path, toml=toml)).id == "org__repo-12"


def test_missing_task_toml(tmp_path):
    assert problems(make_task(tmp_path, toml=None)) == ["task.toml: missing"]


def test_bad_toml_names_line(tmp_path):
    [line] = problems(make_task(tmp_path, toml='schema_version = "1.4"\n[agent]\ntimeout_sec = = 3\n'))
    assert line.startswith("task.toml: invalid TOML") and "line 3" in line


def test_unknown_key_did_you_mean(tmp_path):
    [line] = problems(make_task(tmp_path, toml="[agent]\ntimeout = 10\n"))
    assert line == "WARN task.toml: unknown key [agent].timeout (did you mean timeout_sec?)"
    [strict] = validate_task(make_task(tmp_path, "strict", toml="[agent]\ntimeout = 10\n"), strict=True)
    assert not strict.warning and str(strict).startswith("task.toml: unknown key")


def test_unknown_section(tmp_path):
    [line] = problems(make_task(tmp_path, toml="[enviroment]\ncpus = 1\n"))
    assert line == "WARN task.toml: unknown key enviroment (did you mean environment?)"


def test_unknown_key_warns_and_loads(tmp_path):
    t = load_task(make_task(tmp_path, toml="[agent]\ntimeout = 10\n"))
    assert t.agent_timeout_sec == 600.0
    with pytest.raises(TaskValidationError, match="unknown key"):
        load_task(make_task(tmp_path, "s", toml="[agent]\ntimeout = 10\n"), strict=True)


def test_wrong_types(tmp_path):
    toml = '[agent]\ntimeout_sec = "ten"\n[environment]\nallow_internet = "yes"\nmemory_mb = true\nworkdir = "app"\n'
    got = problems(make_task(tmp_path, toml=toml))
    assert "task.toml: [agent].timeout_sec must be a number, got string 'ten'" in got
    assert "task.toml: [environment].allow_internet must be a boolean, got string 'yes'" in got
    assert "task.toml: [environment].memory_mb must be an integer, got boolean True" in got
    assert "task.toml: [environment].workdir must be an absolute path, got 'app'" in got


def test_section_not_a_table_and_bad_values(tmp_path):
    got = problems(make_task(tmp_path, toml='agent = 5\n[verifier]\ntimeout_sec = -1\n[environment]\nmemory = "lots"\n'))
    assert "task.toml: [agent] must be a table, got integer 5" in got
    assert "task.toml: [verifier].timeout_sec must be > 0, got -1" in got
    assert any(p.startswith("task.toml: [environment].memory is not a size") for p in got)


def test_missing_files_all_reported_at_once(tmp_path):
    d = make_task(tmp_path, instruction=None, env=False, test_sh=None, toml="[agent]\ntimeout = 1\n")
    (d / "solution").mkdir()
    got = problems(d)
    assert got == [
        "WARN task.toml: unknown key [agent].timeout (did you mean timeout_sec?)",
        "instruction.md: missing (the agent's task text)",
        "environment/: missing (needs a Dockerfile and/or files, or [environment].docker_image)",
        "tests/test.sh: missing (tests/ directory does not exist)",
        "solution/solve.sh: missing although solution/ exists",
    ]
    with pytest.raises(TaskValidationError) as exc:
        load_task(d)
    text = str(exc.value)
    assert str(d) in text and "4 problem(s)" in text and text.count("\n") == 4


def test_empty_instruction_and_test_sh(tmp_path):
    got = problems(make_task(tmp_path, instruction="  \n", test_sh=""))
    assert got == ["instruction.md: is empty", "tests/test.sh: is empty"]


def test_docker_image_replaces_environment(tmp_path):
    d = make_task(tmp_path, env=False, toml='[environment]\ndocker_image = "ubuntu:24.04"\n')
    assert load_task(d).docker_image == "ubuntu:24.04"


def test_not_a_directory(tmp_path):
    assert problems(tmp_path / "nope") == [".: does not exist"]


def test_bad_metadata_id(tmp_path):
    assert problems(make_task(tmp_path, toml='[metadata]\nid = ""\n')) == [
        "task.toml: [metadata].id must be a non-empty id string, got ''"]


def test_load_tasks_dir_of_dirs_reports_every_bad_task(tmp_path):
    make_task(tmp_path / "set", "good")
    make_task(tmp_path / "set", "bad1", instruction=None)
    make_task(tmp_path / "set/nested", "bad2", toml="[agent]\ntimeout_sec = 0\n")
    make_task(tmp_path / "set", "warned", toml="[agent]\ntimeout = 1\n")  # a warning, still loads
    with pytest.raises(TaskValidationError) as exc:
        load_tasks(tmp_path / "set")
    lines = str(exc.value).splitlines()[1:]
    assert len(lines) == 2
    assert lines[0].strip().endswith("bad1/instruction.md: missing (the agent's task text)")
    assert "bad2/task.toml: [agent].timeout_sec must be > 0" in lines[1]


def test_load_tasks_one_dir_and_discovery(tmp_path):
    make_task(tmp_path, "a")
    make_task(tmp_path, "b")
    (tmp_path / "_private").mkdir()
    assert [t.id for t in load_tasks(tmp_path)] == ["a", "b"]
    assert [t.id for t in load_tasks(tmp_path / "a")] == ["a"]
    assert [p.name for p in find_task_dirs(tmp_path)] == ["a", "b"]


def test_load_tasks_nothing_found(tmp_path):
    with pytest.raises(TaskValidationError, match=r"no task\.toml found"):
        load_tasks(tmp_path)


def test_harbor_package_name_is_id(tmp_path):
    toml = '[task]\nname = "harbor/hello-world"\ndescription = "hi"\nkeywords = ["x"]\n'
    assert load_task(make_task(tmp_path, toml=toml)).id == "harbor/hello-world"
    assert problems(make_task(tmp_path, "t2", toml="[task]\nname = 3\n")) == [
        "task.toml: [task].name must be an id string like 'org/name', got 3"]


def test_source_label(tmp_path):
    assert load_task(make_task(tmp_path, "a")).source == "local"
    assert load_task(make_task(tmp_path, "b"), source="mine").source == "mine"
    assert load_task(make_task(tmp_path, "c", toml='source = "harbor/tb2"\n'), source="mine").source == "harbor/tb2"


def test_multi_step_task_is_one_clear_problem(tmp_path):
    toml = 'schema_version = "1.1"\nartifacts = ["/app/x"]\n[[steps]]\nname = "a"\n[[steps]]\nname = "b"\n'
    d = make_task(tmp_path, toml=toml, instruction=None, test_sh=None)
    assert problems(d) == ["task.toml: multi-step task ([[steps]], 2 steps) is not supported: "
                           "legorl runs single-step Harbor tasks"]


def test_binary_files_reported(tmp_path):
    d = make_task(tmp_path)
    (d / "task.toml").write_bytes(b"\xff\xfe[agent]\n")
    (d / "instruction.md").write_bytes(b"\xff\xfe")
    got = problems(d)
    assert [p.split(":")[0] for p in got] == ["task.toml", "instruction.md"]
    assert all("not UTF-8 text" in p for p in got)
