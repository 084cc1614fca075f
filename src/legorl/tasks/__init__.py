"""Tasks: Harbor-format task dirs, validation, the parquet index, built-in sets, filters.

    tasks = load_tasks("builtin:shell-basics")      # or a task dir, a dir of them, an index.parquet
    train, val = split_tasks(tasks, 0.2, seed=0)
    build_index(train + val, "tasks.parquet", val_fraction=0.2)
"""

from legorl.tasks.builtin_sets import builtin_sets, load_builtin
from legorl.tasks.index import build_index, load_index_tasks, read_index, split_tasks
from legorl.tasks.loader import (
    Problem,
    TaskValidationError,
    collect_tasks,
    find_task_dirs,
    load_task,
    load_tasks,
    validate_task,
)
from legorl.tasks.model import Task, TaskLimits

__all__ = [
    "Problem",
    "Task",
    "TaskLimits",
    "TaskValidationError",
    "build_index",
    "builtin_sets",
    "collect_tasks",
    "find_task_dirs",
    "load_builtin",
    "load_index_tasks",
    "load_task",
    "load_tasks",
    "read_index",
    "split_tasks",
    "validate_task",
]
