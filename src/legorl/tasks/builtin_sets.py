"""Task sets shipped inside the package (`src/legorl/tasks/builtin/<set>/<task>/`).

They give every install something to train and evaluate on without a download: `shell-basics`
for small models, `shell-multistep` (read the sandbox, then act: multi-turn), `py-bugfix`
(SWE-bench style) for real agents.
"""

from __future__ import annotations

from pathlib import Path

from legorl.tasks.model import Task
from legorl.tasks.taskdir import TaskValidationError, collect_dirs, errors, find_task_dirs

BUILTIN_ROOT = Path(__file__).parent / "builtin"
DESCRIPTIONS = {
    "shell-basics": "one-command terminal tasks (files, text tools, tiny scripts); for small models",
    "shell-multistep": "look-then-act terminal tasks: the answer is in the sandbox (seeded hidden values)",
    "py-bugfix": "small Python repos with failing pytest suites (fail-to-pass + pass-to-pass)",
}


def builtin_sets() -> list[str]:
    """Names of the shipped sets."""
    if not BUILTIN_ROOT.is_dir():
        return []
    return sorted(p.name for p in BUILTIN_ROOT.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def builtin_path(name: str) -> Path:
    path = BUILTIN_ROOT / name
    if name not in builtin_sets():
        raise KeyError(f"unknown built-in task set {name!r}; available: {', '.join(builtin_sets())}")
    return path


def load_builtin(name: str) -> list[Task]:
    """All tasks of one built-in set, with source `builtin:<name>`."""
    tasks, problems = collect_dirs(builtin_path(name), source=f"builtin:{name}")
    if errors(problems):
        raise TaskValidationError(errors(problems))
    return tasks


def builtin_count(name: str) -> int:
    return len(find_task_dirs(builtin_path(name)))
