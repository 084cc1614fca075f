"""A run's train and validation tasks, from its `[tasks]` section."""

from __future__ import annotations

import fnmatch

from legorl.config.sections import TasksSection
from legorl.tasks.index import split_tasks
from legorl.tasks.loader import load_tasks
from legorl.tasks.model import Task


def load_task_split(section: TasksSection) -> tuple[list[Task], list[Task]]:
    """`train` filtered by `include`; `val` when given, else `val_fraction` of train held out."""
    tasks = load_tasks(section.train)
    if section.include:
        tasks = [t for t in tasks if any(fnmatch.fnmatchcase(t.id, g) for g in section.include)]
        if not tasks:
            raise ValueError(f"tasks.include {section.include} matches no task in {section.train}")
    if section.val is not None:
        return tasks, load_tasks(section.val)
    return split_tasks(tasks, section.val_fraction, seed=section.split_seed)
