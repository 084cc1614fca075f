"""Read and validate Harbor-format task directories (one dir, or every task dir under a root).

The bottom of the tasks layer: the index, the built-in sets and `legorl.tasks.loader` all read
task dirs through here, so none of them needs another. Validation never stops at the first problem: a task author fixing a directory wants every
problem at once, each on its own line and naming the file it is about.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.tasks.model import Healthcheck, Network, Task, TaskLimits
from legorl.tasks.schema import baseline_network, parse_size_mb, phase_network, validate_config

log = logging.getLogger(__name__)

_ID_KEYS = ("id", "task_id", "instance_id")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:+-]*$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a task directory, about one file in it."""

    task_dir: Path
    file: str  # relative to task_dir, e.g. "task.toml" or "tests/test.sh"
    message: str
    warning: bool = False  # the task still loads (an unknown key, as Harbor ignores extras)

    def __str__(self) -> str:
        return f"{'WARN ' if self.warning else ''}{self.file}: {self.message}"

    def full(self) -> str:
        return f"{'WARN ' if self.warning else ''}{self.task_dir / self.file}: {self.message}"


def errors(problems: list[Problem]) -> list[Problem]:
    """The problems that make a task unusable (warnings dropped)."""
    return [p for p in problems if not p.warning]


class TaskValidationError(ValueError):
    """Raised with every problem found, so one run lists all fixes needed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        dirs = sorted({str(p.task_dir) for p in problems})
        where = dirs[0] if len(dirs) == 1 else f"{len(dirs)} task dirs"
        lines = [p.full() if len(dirs) > 1 else str(p) for p in problems]
        super().__init__(f"invalid task ({where}), {len(problems)} problem(s):\n  " + "\n  ".join(lines))


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


def validate_task(task_dir: str | Path, strict: bool = False) -> list[Problem]:
    """Every problem and warning of a task directory (empty list when it is clean)."""
    return read_task(Path(task_dir), source=None, strict=strict)[1]


def load_task(task_dir: str | Path, source: str | None = None, strict: bool = False) -> Task:
    """Parse one Harbor task dir; raise TaskValidationError listing every problem.

    `source` labels tasks whose task.toml has no top-level `source`. Unknown task.toml keys are
    warnings (logged) unless `strict`, so newer Harbor fields never block a run; type and
    missing-file problems always raise.
    """
    task, problems = read_task(Path(task_dir), source=source, strict=strict)
    if task is None:
        raise TaskValidationError(errors(problems))
    return task


def read_task(task_dir: Path, source: str | None, strict: bool = False) -> tuple[Task | None, list[Problem]]:
    """(task, warnings) for a valid dir, else (None, every problem); the shared core of every loader."""
    task_dir = task_dir.expanduser().resolve()
    problems: list[Problem] = []

    def add(file: str, message: str) -> None:
        problems.append(Problem(task_dir, file, message))

    def warn(file: str, message: str) -> None:
        if strict:
            return add(file, message)
        log.warning("%s: %s", task_dir / file, message)
        problems.append(Problem(task_dir, file, message, warning=True))

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
            validate_config(cfg, add, warn)
    # A multi-step task keeps instructions and tests under steps/: one problem line says it all.
    instruction = "" if "steps" in cfg else _check_files(task_dir, cfg, add)
    task_id = _task_id(task_dir, cfg, add)
    if errors(problems):
        return None, problems
    return _build(task_dir, task_id, instruction, cfg, source), problems


def _host_env(table: dict[str, str]) -> dict[str, str]:
    """Harbor resolves ${VAR} and ${VAR:-default} in env tables from the host's environment."""
    pat = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
    return {k: pat.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), v) for k, v in table.items()}


def _network(section: dict[str, Any], base: tuple[str, list[str]]) -> Network:
    mode, hosts = phase_network(section)
    if mode is None:
        mode, hosts = base
    return Network(mode, tuple(hosts))


def _user(section: dict[str, Any]) -> str | None:
    u = section.get("user")
    return None if u is None else str(u)


def _build(task_dir: Path, task_id: str, instruction: str, cfg: dict[str, Any], source: str | None) -> Task:
    env = cfg.get("environment", {})
    agent, verifier = cfg.get("agent", {}), cfg.get("verifier", {})
    venv = verifier.get("environment", {})
    defaults = Task(id="", path=task_dir, instruction="")
    limits = TaskLimits()
    memory_mb = env.get("memory_mb")
    if memory_mb is None and "memory" in env:
        memory_mb = parse_size_mb(env["memory"])
    storage_mb = env.get("storage_mb")
    if storage_mb is None and "storage" in env:
        storage_mb = parse_size_mb(env["storage"])
    base = baseline_network(env)
    agent_net = _network(agent, base)
    # A separate verifier environment has its own baseline; the [verifier] keys override both.
    verifier_net = _network(verifier, baseline_network(venv) if venv else base)
    hc = env.get("healthcheck")
    arts = tuple(a if isinstance(a, str) else a.get("source", a.get("path", "")) for a in cfg.get("artifacts", []))
    return Task(
        id=task_id,
        path=task_dir,
        instruction=instruction,
        workdir=env.get("workdir", defaults.workdir),
        agent_timeout_sec=float(agent.get("timeout_sec") or defaults.agent_timeout_sec),
        verifier_timeout_sec=float(verifier.get("timeout_sec", defaults.verifier_timeout_sec)),
        build_timeout_sec=float(env.get("build_timeout_sec", defaults.build_timeout_sec)),
        limits=TaskLimits(
            cpus=float(env.get("cpus", limits.cpus)),
            memory_mb=int(memory_mb if memory_mb is not None else limits.memory_mb),
            storage_mb=storage_mb if storage_mb is not None else limits.storage_mb,
            allow_internet=agent_net.public,
            gpus=int(env.get("gpus", limits.gpus)),
        ),
        docker_image=env.get("docker_image"),
        source=cfg.get("source") or source or "local",  # the task's own label wins
        metadata=dict(cfg.get("metadata", {})),
        verifier_env=_host_env({**venv.get("env", {}), **verifier.get("env", {})}),
        solution_env=_host_env(cfg.get("solution", {}).get("env", {})),
        environment_env=_host_env(env.get("env", {})),
        agent_env=_host_env(agent.get("env", {})),
        agent_user=_user(agent),
        verifier_user=_user(verifier),
        agent_network=agent_net,
        verifier_network=verifier_net,
        verifier_separate=verifier.get("environment_mode") == "separate" or bool(venv),
        healthcheck=Healthcheck(**hc) if hc else None,
        artifacts=arts,
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
                 strict: bool = False) -> tuple[list[Task], list[Problem]]:
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
