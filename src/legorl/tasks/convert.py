"""Convert SWE-bench-style records into Harbor task dirs.

A record: instance_id, snapshot (dict path->content, or a directory), problem_statement,
FAIL_TO_PASS / PASS_TO_PASS (pytest node ids, lists or JSON strings), optional test_patch and
patch (gold; each a unified diff or a dict path->content, null deletes), optional test_cmd
(default `python3 -m pytest`), repo, metadata, agent_timeout_sec, verifier_timeout_sec.

The generated tests/test.sh restores the test_patch and conftest.py files, runs pytest through a
driver that a planted pytest.py / conftest.py cannot steer, records outcomes with a small plugin
(exact node ids, no console parsing), and writes reward 1 only when every fail-to-pass test
passes and every pass-to-pass test still passes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from legorl.tasks.taskdir import load_task

VERIFIER_FILES = Path(__file__).parent / "_verifier"
GRADING_FILES = ("grade.py", "legorl_outcomes.py", "run_pytest.py")
DEFAULT_TEST_CMD = "python3 -m pytest"
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
Files = dict[str, bytes | None]  # None = delete


class ConversionError(ValueError):
    """A record cannot become a task; the message lists each problem with its record."""


@dataclass
class Record:
    instance_id: str
    snapshot: dict[str, bytes]
    problem_statement: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    test_files: dict[str, bytes] = field(default_factory=dict)
    gold: Files = field(default_factory=dict)
    test_cmd: str = DEFAULT_TEST_CMD
    metadata: dict[str, Any] = field(default_factory=dict)
    agent_timeout_sec: float = 900.0
    verifier_timeout_sec: float = 180.0


def _id_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if not isinstance(value, list) or not all(isinstance(v, str) and "::" in v for v in value):
        raise ValueError(f"{name} must be a list of pytest node ids (path::name)")
    return list(value)


def _read_snapshot(value: Any, base: Path) -> dict[str, bytes]:
    if isinstance(value, dict):
        return {_clean_rel(k): _content(k, v) for k, v in value.items()}
    if isinstance(value, str):
        root = (base / value).resolve()
        if not root.is_dir():
            raise ValueError(f"snapshot directory {root} does not exist")
        files = {}
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and not SKIP_DIRS.intersection(rel.parts) and path.suffix != ".pyc":
                files[rel.as_posix()] = path.read_bytes()
        return files
    raise ValueError("snapshot must be a dict of path->content or a directory path")


def _content(path: str, value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    raise TypeError(f"content of {path!r} must be text, got {type(value).__name__}")


def _clean_rel(path: str) -> str:
    p = Path(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"bad file path {path!r}: must be relative, without '..'")
    return p.as_posix()


def apply_patch(files: dict[str, bytes], patch: Any) -> Files:
    """Changed files after applying `patch` (unified diff or dict) to `files`."""
    if isinstance(patch, dict):
        return {_clean_rel(k): None if v is None else _content(k, v) for k, v in patch.items()}
    if not isinstance(patch, str):
        raise ValueError("patch must be a unified diff string or a dict path->content")
    if shutil.which("git") is None:
        raise ValueError("applying a unified diff needs git on PATH")
    with tempfile.TemporaryDirectory(prefix="legorl-patch-") as tmp:
        root = Path(tmp) / "repo"
        _write_tree(root, files)
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": tmp}
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], input=patch.encode(),
                              cwd=root, env=env, capture_output=True, check=False)
        if proc.returncode != 0:
            raise ValueError(f"patch does not apply: {proc.stderr.decode(errors='replace').strip()}")
        links = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_symlink()]
        if links:
            raise ValueError(f"patch creates symlinks, which tasks cannot carry: {', '.join(links)}")
        after = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    changed: Files = {k: v for k, v in after.items() if files.get(k) != v}
    changed.update({k: None for k in files if k not in after})
    return changed


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def parse_record(raw: dict[str, Any], base: Path = Path(".")) -> Record:
    """Validate one record; raise ValueError naming every problem."""
    problems: list[str] = []
    rec: dict[str, Any] = {}

    def take(name: str, fn, *aliases: str, required: bool = True) -> None:
        key = next((k for k in (name, *aliases) if k in raw), None)
        if key is None:
            if required:
                problems.append(f"missing field {name}")
            return
        try:
            rec[name] = fn(raw[key])
        except (ValueError, TypeError, json.JSONDecodeError) as exc:
            problems.append(f"{key}: {exc}")

    take("instance_id", lambda v: v if isinstance(v, str) and v.strip() else _bad("a non-empty string"))
    take("snapshot", lambda v: _read_snapshot(v, base), "repo_snapshot")
    take("problem_statement", lambda v: v if isinstance(v, str) and v.strip() else _bad("non-empty text"))
    take("fail_to_pass", lambda v: _id_list(v, "FAIL_TO_PASS"), "FAIL_TO_PASS")
    take("pass_to_pass", lambda v: _id_list(v, "PASS_TO_PASS"), "PASS_TO_PASS", required=False)
    if problems:
        raise ValueError("; ".join(problems))
    snapshot = rec["snapshot"]
    take("test_files", lambda v: apply_patch(snapshot, v), "test_patch", required=False)
    take("gold", lambda v: apply_patch({**snapshot, **{k: b for k, b in rec.get("test_files", {}).items()
                                                        if b is not None}}, v),
         "patch", "gold_patch", required=False)
    take("test_cmd", lambda v: v if isinstance(v, str) and v.strip() else _bad("a command"), required=False)
    if rec.get("test_files") and any(v is None for v in rec["test_files"].values()):
        problems.append("test_patch: deleting files is not supported")
    if not rec.get("fail_to_pass"):
        problems.append("FAIL_TO_PASS is empty: nothing would tell a fix from no change")
    if "Dockerfile" in snapshot:
        problems.append("snapshot: a top-level Dockerfile would clash with environment/Dockerfile")
    if problems:
        raise ValueError("; ".join(problems))
    meta = dict(raw.get("metadata") or {})
    if raw.get("repo"):
        meta.setdefault("repo", raw["repo"])
    return Record(
        instance_id=rec["instance_id"], snapshot=snapshot, problem_statement=rec["problem_statement"],
        fail_to_pass=rec["fail_to_pass"], pass_to_pass=rec.get("pass_to_pass", []),
        test_files={k: v for k, v in rec.get("test_files", {}).items() if v is not None},
        gold=rec.get("gold", {}), test_cmd=rec.get("test_cmd", DEFAULT_TEST_CMD), metadata=meta,
        agent_timeout_sec=float(raw.get("agent_timeout_sec", 900.0)),
        verifier_timeout_sec=float(raw.get("verifier_timeout_sec", 180.0)),
    )


def _bad(what: str):
    raise ValueError(f"must be {what}")


def _file_writer(rel: str, data: bytes | None) -> str:
    """Bash that recreates one file exactly: a readable heredoc when possible, else base64."""
    q = shlex.quote(rel)
    if data is None:
        return f"rm -f -- {q}\n"
    head = f"mkdir -p -- {shlex.quote(str(Path(rel).parent))}\n" if Path(rel).parent != Path(".") else ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    marker = "LEGORL_EOF"
    if text is not None and text.endswith("\n") and marker not in text.splitlines():
        return f"{head}cat > {q} <<'{marker}'\n{text}{marker}\n"
    import base64

    return f"{head}base64 -d > {q} <<'{marker}'\n{base64.encodebytes(data).decode()}{marker}\n"


def _test_sh(rec: Record) -> str:
    files = " ".join(map(shlex.quote, sorted({t.split("::", 1)[0] for t in rec.fail_to_pass + rec.pass_to_pass})))
    flags = f"-p no:cacheprovider -rA --rootdir=. {files}"
    if rec.test_cmd == DEFAULT_TEST_CMD:  # hardened driver: same pytest, no module shadowing
        run = f'python3 -I "$TESTS_DIR/grading/run_pytest.py" "$TESTS_DIR/config.json" {flags}'
    else:
        run = (f'python3 -I "$TESTS_DIR/grading/run_pytest.py" "$TESTS_DIR/config.json" --clean-only\n'
               f'PYTHONPATH="$TESTS_DIR/grading${{PYTHONPATH:+:$PYTHONPATH}}" {rec.test_cmd} -p legorl_outcomes {flags}')
    return f"""#!/bin/bash
# Verifier for {rec.instance_id} (generated by `legorl tasks convert`).
# Reward 1 only if every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.
set -u
TESTS_DIR="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
LOGS=/logs/verifier
mkdir -p "$LOGS"
echo 0 > "$LOGS/reward.txt"
# Graded test files and conftest.py files come from the task, not from the agent's workdir.
[ -d "$TESTS_DIR/files" ] && cp -R "$TESTS_DIR/files/." .
export PYTHONDONTWRITEBYTECODE=1 LEGORL_OUTCOMES="$LOGS/outcomes.json"
{run} > "$LOGS/pytest.log" 2>&1
echo "pytest exit status: $?"
tail -n 30 "$LOGS/pytest.log"
python3 -I "$TESTS_DIR/grading/grade.py" "$TESTS_DIR/config.json" "$LOGS/outcomes.json" "$LOGS"
"""


def _dockerfile(snapshot: dict[str, bytes], workdir: str) -> str:
    tops = sorted({rel.split("/", 1)[0] + ("/" if "/" in rel else "") for rel in snapshot})
    copies = "".join(
        f"COPY {json.dumps([t, f'{workdir}/{t}'])}\n" if any(c.isspace() for c in t) else f"COPY {t} {workdir}/{t}\n"
        for t in tops)
    # Guarded install: a no-op where python3 + pytest already exist (e.g. the local bubblewrap
    # backend, which runs RUN lines offline on the host system), a real install in ubuntu:24.04.
    return (
        "FROM ubuntu:24.04\n"
        'RUN python3 -c "import pytest" 2>/dev/null || (apt-get update \\\n'
        "    && apt-get install -y --no-install-recommends python3 python3-pytest \\\n"
        "    && rm -rf /var/lib/apt/lists/*)\n"
        f"WORKDIR {workdir}\n{copies}"
    )


def _verifier(rec: Record) -> dict[str, bytes]:
    """The verifier code a task carries (task-relative path -> bytes): test.sh and the grading driver."""
    return {"tests/test.sh": _test_sh(rec).encode(),
            **{f"tests/grading/{name}": (VERIFIER_FILES / name).read_bytes() for name in GRADING_FILES}}


def refresh_verifier(task_dir: str | Path, write: bool = True) -> list[str]:
    """Bring a converted task's verifier code up to this legorl's (the graded data stays as is).

    Converted tasks carry a copy of the verifier, so a fix to it reaches tasks on disk (the shipped
    `py-bugfix` set among them) only through this. Reads only tests/config.json and task.toml (so a
    deleted test.sh comes back); returns the task-relative paths that differ, rewritten when `write`.
    """
    task_dir = Path(task_dir)
    cfg = json.loads((task_dir / "tests/config.json").read_text(encoding="utf-8"))
    meta = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8")).get("metadata", {})
    rec = Record(instance_id=str(meta.get("instance_id", task_dir.name)), snapshot={}, problem_statement="",
                 fail_to_pass=cfg["fail_to_pass"], pass_to_pass=cfg["pass_to_pass"], test_cmd=cfg["test_cmd"])
    stale = {rel: data for rel, data in _verifier(rec).items()
             if not (task_dir / rel).is_file() or (task_dir / rel).read_bytes() != data}
    if write:
        _write_tree(task_dir, stale)
        for rel in stale:
            if rel.endswith(".sh"):
                (task_dir / rel).chmod(0o755)
    return sorted(stale)


def write_task(rec: Record, out_dir: str | Path, source: str = "converted", overwrite: bool = False) -> Path:
    """Write one Harbor task dir for `rec` under out_dir and check that it loads."""
    workdir = "/app"
    task_dir = Path(out_dir) / rec.instance_id.replace("/", "__")
    if task_dir.exists():
        if not overwrite:
            raise ConversionError(f"{task_dir} exists (use overwrite=True / --overwrite)")
        shutil.rmtree(task_dir)
    restored = {k: v for k, v in rec.snapshot.items() if Path(k).name == "conftest.py"} | rec.test_files
    conftests = [k for k in restored if Path(k).name == "conftest.py"]
    meta = {"source": source, "category": "bugfix", "instance_id": rec.instance_id,
            "fail_to_pass": len(rec.fail_to_pass), "pass_to_pass": len(rec.pass_to_pass), **rec.metadata}
    config = {
        "schema_version": "1.4",
        "source": source,
        "metadata": meta,
        "verifier": {"timeout_sec": rec.verifier_timeout_sec},
        "agent": {"timeout_sec": rec.agent_timeout_sec},
        "environment": {"build_timeout_sec": 600.0, "cpus": 1, "memory_mb": 2048, "storage_mb": 2048,
                        "allow_internet": False, "workdir": workdir},
    }
    _write_tree(task_dir, {
        "task.toml": tomli_w.dumps(config).encode(),
        "instruction.md": _instruction(rec, workdir).encode(),
        "environment/Dockerfile": _dockerfile(rec.snapshot, workdir).encode(),
        **{f"environment/{k}": v for k, v in rec.snapshot.items()},
        "tests/config.json": json.dumps({"fail_to_pass": rec.fail_to_pass, "pass_to_pass": rec.pass_to_pass,
                                         "test_cmd": rec.test_cmd, "conftests": sorted(conftests)},
                                        indent=1).encode(),
        **_verifier(rec),
        **{f"tests/files/{k}": v for k, v in restored.items()},
    })
    if rec.gold:
        body = "".join(_file_writer(k, v) for k, v in sorted(rec.gold.items()))
        (task_dir / "solution").mkdir()
        (task_dir / "solution/solve.sh").write_text(
            f"#!/bin/bash\n# Oracle for {rec.instance_id}: writes the gold patch's files.\n"
            f"set -euo pipefail\ncd {workdir}\n{body}")
    for sh in task_dir.rglob("*.sh"):
        sh.chmod(0o755)
    load_task(task_dir)  # a converter bug must not ship an invalid task
    return task_dir


def _instruction(rec: Record, workdir: str) -> str:
    return (f"{rec.problem_statement.rstrip()}\n\n---\nThe repository is checked out at `{workdir}`. "
            "Change the source code so that the issue above is resolved; the test suite "
            f"(`{rec.test_cmd}`) must keep passing.\n")


def convert_records(raws: list[dict[str, Any]], out_dir: str | Path, base: Path = Path("."),
                    source: str = "converted", overwrite: bool = False, where: str = "record") -> list[Path]:
    """Convert many records; every bad record is reported before anything is written."""
    parsed, problems = [], []
    for i, raw in enumerate(raws, 1):
        label = f"{where} {i}" + (f" ({raw.get('instance_id')})" if isinstance(raw, dict) else "")
        try:
            if not isinstance(raw, dict):
                raise ValueError("must be a JSON object")
            parsed.append(parse_record(raw, base))
        except ValueError as exc:
            problems.append(f"{label}: {exc}")
    ids = [r.instance_id for r in parsed]
    problems += [f"duplicate instance_id {i!r}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    if problems:
        raise ConversionError(f"{len(problems)} bad record(s):\n  " + "\n  ".join(problems))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return [write_task(r, out_dir, source=source, overwrite=overwrite) for r in parsed]


def convert_file(path: str | Path, out_dir: str | Path, source: str = "converted",
                 overwrite: bool = False) -> list[Path]:
    """Convert a .jsonl file, or a .json list (snapshot directories resolve relative to it)."""
    path = Path(path)
    raws: list[Any] = []
    if path.suffix == ".json":
        try:
            raws = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConversionError(f"{path}: invalid JSON: {exc}") from None
        if not isinstance(raws, list):
            raise ConversionError(f"{path}: a .json file must hold a list of records")
        return convert_records(raws, out_dir, base=path.parent, source=source, overwrite=overwrite,
                               where=f"{path.name} record")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                raws.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConversionError(f"{path}:{n}: invalid JSON: {exc}") from None
    return convert_records(raws, out_dir, base=path.parent, source=source, overwrite=overwrite,
                           where=f"{path.name} record")
