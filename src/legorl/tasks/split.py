"""A run's train and validation tasks, from its `[tasks]` section."""

from __future__ import annotations

import fnmatch

from legorl.config.trials import TasksSection
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
    if section.stratify_by is None:
        return split_tasks(tasks, section.val_fraction, seed=section.split_seed)
    return stratified_split(tasks, section.val_fraction, section.stratify_by, seed=section.split_seed)


def stratified_split(tasks: list[Task], val_fraction: float, key: str, seed: int = 0) -> tuple[list[Task], list[Task]]:
    """`split_tasks` within each value of metadata `key` (tasks without it form one group): a random split of
    a small set can leave a kind out of validation altogether. Order within each side follows the input."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(str(t.metadata.get(key)), []).append(t)
    val_ids = {t.id for group in groups.values() for t in split_tasks(group, val_fraction, seed=seed)[1]}
    return [t for t in tasks if t.id not in val_ids], [t for t in tasks if t.id in val_ids]
