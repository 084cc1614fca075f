"""Where tasks come from: one task dir, a directory of them, a parquet index, or `builtin:<set>`.

Only this module knows every source; reading and validating one directory lives below it in
`legorl.tasks.taskdir` (re-exported here, so `from legorl.tasks.loader import load_task` keeps
working).
"""

from __future__ import annotations

from pathlib import Path

from legorl.tasks.builtin_sets import builtin_path
from legorl.tasks.index import collect_index_tasks
from legorl.tasks.model import Task
from legorl.tasks.taskdir import (
    Problem,
    TaskValidationError,
    collect_dirs,
    errors,
    find_task_dirs,
    load_task,
    validate_task,
)

__all__ = ["Problem", "TaskValidationError", "collect_tasks", "find_task_dirs", "load_task", "load_tasks",
           "validate_task"]


def load_tasks(path: str | Path, source: str | None = None, strict: bool = False) -> list[Task]:
    """Tasks from one task dir, a directory of task dirs, a parquet index, or `builtin:<set>`.

    Every invalid task is reported in one TaskValidationError rather than failing on the first.
    """
    tasks, problems = collect_tasks(path, source=source, strict=strict)
    if errors(problems):
        raise TaskValidationError(errors(problems))
    return tasks


def collect_tasks(path: str | Path, source: str | None = None,
                  strict: bool = False) -> tuple[list[Task], list[Problem]]:
    """Like load_tasks, but returns (valid tasks, problems and warnings) instead of raising."""
    text = str(path)
    if text.startswith("builtin:"):
        name = text.removeprefix("builtin:")
        return collect_dirs(builtin_path(name), source=source or f"builtin:{name}", strict=strict)
    p = Path(path).expanduser()
    if p.is_file() and p.suffix == ".parquet":
        return collect_index_tasks(p, strict=strict)
    return collect_dirs(p, source=source, strict=strict)
