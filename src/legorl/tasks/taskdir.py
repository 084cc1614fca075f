"""Read and validate Harbor-format task directories (one dir, or every task dir under a root).

The bottom of the tasks layer: the index, the built-in sets and `legorl.tasks.loader` all read
task dirs through here, so none of them needs another. Validation never stops at the first problem: a task author fixing a directory wants every
problem at once, each on its own line and naming the file it is about.
"""

from __future__ import annotations

import difflib
import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.tasks.model import Task, TaskLimits

log = logging.getLogger(__name__)

# Keys Harbor documents for task.toml. A key outside these is almost always a typo, which would
# otherwise silently fall back to a default (e.g. an agent timeout that never applies).
_TOP_KEYS = {"version", "schema_version", "source", "metadata", "task", "verifier", "agent",
             "environment", "solution", "artifacts", "steps"}
_SECTION_KEYS: dict[str, set[str]] = {
    "verifier": {"timeout_sec", "env", "user"},
    "agent": {"timeout_sec", "user"},
    "solution": {"env"},
    "environment": {"build_timeout_sec", "docker_image", "cpus", "memory", "memory_mb", "storage",
                    "storage_mb", "gpus", "gpu_types", "allow_internet", "workdir", "mcp_servers",
                    "skills_dir", "env", "healthcheck"},
}
_FREE_SECTIONS = {"metadata", "task"}  # free-form tables: any keys allowed
_NUMBER = (int, float)
_TYPES: dict[tuple[str, str], tuple[type | tuple[type, ...], str]] = {
    ("", "version"): (str, "a string"),
    ("", "schema_version"): (str, "a string"),
    ("", "source"): (str, "a string"),
    ("verifier", "timeout_sec"): (_NUMBER, "a number"),
    ("verifier", "env"): (dict, "a table"),
    ("agent", "timeout_sec"): (_NUMBER, "a number"),
    ("solution", "env"): (dict, "a table"),
    ("environment", "build_timeout_sec"): (_NUMBER, "a number"),
    ("environment", "docker_image"): (str, "a string"),
    ("environment", "cpus"): (_NUMBER, "a number"),
    ("environment", "memory"): (str, 'a size string like "2G"'),
    ("environment", "memory_mb"): (int, "an integer"),
    ("environment", "storage"): (str, 'a size string like "10G"'),
    ("environment", "storage_mb"): (int, "an integer"),
    ("environment", "gpus"): (int, "an integer"),
    ("environment", "allow_internet"): (bool, "a boolean"),
    ("environment", "workdir"): (str, "a string"),
}
_ID_KEYS = ("id", "task_id", "instance_id")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:+-]*$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a task directory, about one file in it."""

    task_dir: Path
    file: str  # relative to task_dir, e.g. "task.toml" or "tests/test.sh"
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"

    def full(self) -> str:
        return f"{self.task_dir / self.file}: {self.message}"


class TaskValidationError(ValueError):
    """Raised with every problem found, so one run lists all fixes needed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        dirs = sorted({str(p.task_dir) for p in problems})
        where = dirs[0] if len(dirs) == 1 else f"{len(dirs)} task dirs"
        lines = [p.full() if len(dirs) > 1 else str(p) for p in problems]
        super().__init__(f"invalid task ({where}), {len(problems)} problem(s):\n  " + "\n  ".join(lines))


def _type_name(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table",
            list: "array"}.get(type(v), type(v).__name__)


def _check_keys(section: str, table: dict[str, Any], known: set[str], add) -> None:
    for key in table:
        if key in known:
            continue
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(sorted(known))})"
        where = f"[{section}].{key}" if section else key
        add("task.toml", f"unknown key {where}{hint}")


def _check_type(section: str, key: str, value: Any, add) -> bool:
    spec = _TYPES.get((section, key))
    if spec is None:
        return True
    want, desc = spec
    # bool is an int subclass in Python; TOML keeps them apart, so do we.
    ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
    if not ok:
        where = f"[{section}].{key}" if section else key
        add("task.toml", f"{where} must be {desc}, got {_type_name(value)} {value!r}")
    return ok


def parse_size_mb(text: str) -> int | None:
    """'2G' -> 2048, '512M' -> 512, '1.5g' -> 1536; None when unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    scale = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def _read_toml(path: Path, add) -> dict[str, Any] | None:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:  # message carries "(at line N, column M)"
        add("task.toml", f"invalid TOML: {exc}")
    except UnicodeDecodeError as exc:
        add("task.toml", f"not UTF-8 text: {exc}")
    except OSError as exc:
        add("task.toml", f"unreadable: {exc.strerror or exc}")
    return None


def _validate_config(cfg: dict[str, Any], add) -> None:
    _check_keys("", cfg, _TOP_KEYS, add)
    if "steps" in cfg:
        n = len(cfg["steps"]) if isinstance(cfg["steps"], list) else "?"
        add("task.toml", f"multi-step task ([[steps]], {n} steps) is not supported: legorl runs "
                         "single-step Harbor tasks")
    for key, value in cfg.items():
        if key in _SECTION_KEYS or key in _FREE_SECTIONS:
            if not isinstance(value, dict):
                add("task.toml", f"[{key}] must be a table, got {_type_name(value)} {value!r}")
                continue
            if key in _SECTION_KEYS:
                _check_keys(key, value, _SECTION_KEYS[key], add)
                for sub, v in value.items():
                    if _check_type(key, sub, v, add):
                        _check_range(key, sub, v, add)
        else:
            _check_type("", key, value, add)


def _check_range(section: str, key: str, value: Any, add) -> None:
    if key.endswith("timeout_sec") or key in ("cpus", "memory_mb", "storage_mb"):
        if isinstance(value, _NUMBER) and value <= 0:
            add("task.toml", f"[{section}].{key} must be > 0, got {value!r}")
    elif key in ("memory", "storage") and parse_size_mb(value) is None:
        add("task.toml", f'[{section}].{key} is not a size like "2G" or "512M": {value!r}')
    elif key == "env" and not all(isinstance(v, str) for v in value.values()):
        bad = next(k for k, v in value.items() if not isinstance(v, str))
        add("task.toml", f"[{section}].env values must be strings, got {_type_name(value[bad])} for {bad}")
    elif key == "workdir" and not value.startswith("/"):
        add("task.toml", f"[{section}].workdir must be an absolute path, got {value!r}")


def _task_id(task_dir: Path, cfg: dict[str, Any], add) -> str:
    """[metadata] id / task_id / instance_id, else Harbor's [task].name, else the dir name."""
    meta = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    for key in _ID_KEYS:
        if key in meta:
            value = meta[key]
            if not isinstance(value, str) or not _ID_RE.match(value):
                add("task.toml", f"[metadata].{key} must be a non-empty id string, got {value!r}")
                break
            return value
    pkg = cfg.get("task") if isinstance(cfg.get("task"), dict) else {}
    if "name" in pkg:  # Harbor's package name ("org/name") is the task's registry identity
        if isinstance(pkg["name"], str) and _ID_RE.match(pkg["name"]):
            return pkg["name"]
        add("task.toml", f"[task].name must be an id string like 'org/name', got {pkg['name']!r}")
    return task_dir.name


def _check_files(task_dir: Path, cfg: dict[str, Any], add) -> str:
    """Check the files beside task.toml; return the instruction text ('' if unusable)."""
    instruction = ""
    ipath = task_dir / "instruction.md"
    if not ipath.is_file():
        add("instruction.md", "missing (the agent's task text)")
    else:
        try:
            instruction = ipath.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            add("instruction.md", f"not UTF-8 text: {exc}")
        except OSError as exc:
            add("instruction.md", f"unreadable: {exc.strerror or exc}")
        else:
            if not instruction.strip():
                add("instruction.md", "is empty")
    env = cfg.get("environment") if isinstance(cfg.get("environment"), dict) else {}
    env_dir = task_dir / "environment"
    if env_dir.exists() and not env_dir.is_dir():
        add("environment", "must be a directory")
    elif not env_dir.is_dir() and not env.get("docker_image"):
        add("environment/", "missing (needs a Dockerfile and/or files, or [environment].docker_image)")
    test_sh = task_dir / "tests" / "test.sh"
    if not (task_dir / "tests").is_dir():
        add("tests/test.sh", "missing (tests/ directory does not exist)")
    elif not test_sh.is_file():
        add("tests/test.sh", "missing (the verifier entry point)")
    elif not test_sh.read_bytes().strip():
        add("tests/test.sh", "is empty")
    sol = task_dir / "solution"
    if sol.is_dir() and not (sol / "solve.sh").is_file():
        add("solution/solve.sh", "missing although solution/ exists")
    return instruction


def validate_task(task_dir: str | Path) -> list[Problem]:
    """Every problem with a task directory (empty list when it is valid)."""
    return read_task(Path(task_dir), source=None, strict=True)[1]


def load_task(task_dir: str | Path, source: str | None = None, strict: bool = True) -> Task:
    """Parse one Harbor task dir; raise TaskValidationError listing every problem.

    `source` labels tasks whose task.toml has no top-level `source`. `strict=False` lets unknown
    task.toml keys through (logged) so newer Harbor fields never block a run; type and
    missing-file problems always raise.
    """
    task, problems = read_task(Path(task_dir), source=source, strict=strict)
    if problems or task is None:
        raise TaskValidationError(problems)
    return task


def read_task(task_dir: Path, source: str | None, strict: bool) -> tuple[Task | None, list[Problem]]:
    """(task, []) for a valid dir, else (None, every problem); the shared core of every loader."""
    task_dir = task_dir.expanduser().resolve()
    problems: list[Problem] = []

    def add(file: str, message: str) -> None:
        if not strict and message.startswith("unknown key"):
            log.warning("%s: %s", task_dir / file, message)
            return
        problems.append(Problem(task_dir, file, message))

    if not task_dir.is_dir():
        add(".", "not a directory" if task_dir.exists() else "does not exist")
        return None, problems
    cfg: dict[str, Any] = {}
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        add("task.toml", "missing")
    else:
        parsed = _read_toml(toml_path, add)
        if parsed is not None:
            cfg = parsed
            _validate_config(cfg, add)
    # A multi-step task keeps instructions and tests under steps/: one problem line says it all.
    instruction = "" if "steps" in cfg else _check_files(task_dir, cfg, add)
    task_id = _task_id(task_dir, cfg, add)
    if problems:
        return None, problems
    return _build(task_dir, task_id, instruction, cfg, source), problems


def _build(task_dir: Path, task_id: str, instruction: str, cfg: dict[str, Any], source: str | None) -> Task:
    env = cfg.get("environment", {})
    defaults = Task(id="", path=task_dir, instruction="")
    limits = TaskLimits()
    memory_mb = env.get("memory_mb")
    if memory_mb is None and "memory" in env:
        memory_mb = parse_size_mb(env["memory"])
    storage_mb = env.get("storage_mb")
    if storage_mb is None and "storage" in env:
        storage_mb = parse_size_mb(env["storage"])
    return Task(
        id=task_id,
        path=task_dir,
        instruction=instruction,
        workdir=env.get("workdir", defaults.workdir),
        agent_timeout_sec=float(cfg.get("agent", {}).get("timeout_sec", defaults.agent_timeout_sec)),
        verifier_timeout_sec=float(cfg.get("verifier", {}).get("timeout_sec", defaults.verifier_timeout_sec)),
        build_timeout_sec=float(env.get("build_timeout_sec", defaults.build_timeout_sec)),
        limits=TaskLimits(
            cpus=float(env.get("cpus", limits.cpus)),
            memory_mb=int(memory_mb if memory_mb is not None else limits.memory_mb),
            storage_mb=storage_mb if storage_mb is not None else limits.storage_mb,
            allow_internet=bool(env.get("allow_internet", limits.allow_internet)),
            gpus=int(env.get("gpus", limits.gpus)),
        ),
        docker_image=env.get("docker_image"),
        source=cfg.get("source") or source or "local",  # the task's own label wins
        metadata=dict(cfg.get("metadata", {})),
        verifier_env=dict(cfg.get("verifier", {}).get("env", {})),
        solution_env=dict(cfg.get("solution", {}).get("env", {})),
    )


def find_task_dirs(root: str | Path) -> list[Path]:
    """Task dirs at or under root (a dir holding task.toml is a task; its insides are not searched)."""
    root = Path(root).expanduser().resolve()
    if (root / "task.toml").is_file():
        return [root]
    found: list[Path] = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and child.name != "__pycache__":
            found.extend(find_task_dirs(child))
    return found


def collect_dirs(root: str | Path, source: str | None = None,
                 strict: bool = True) -> tuple[list[Task], list[Problem]]:
    """(valid tasks, problems) for every task dir at or under `root`."""
    p = Path(root).expanduser()
    dirs = find_task_dirs(p)
    if not dirs:
        return [], [Problem(p.resolve(), ".", "no task.toml found here or below")]
    tasks: list[Task] = []
    problems: list[Problem] = []
    for d in dirs:
        task, probs = read_task(d, source=source, strict=strict)
        problems.extend(probs)
        if task is not None:
            tasks.append(task)
    return tasks, problems
