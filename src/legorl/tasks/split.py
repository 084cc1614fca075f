"""A run's train and validation tasks, from its `[tasks]` section."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable

from legorl.config.trials import TasksSection
from legorl.tasks.index import split_tasks
from legorl.tasks.loader import load_tasks
from legorl.tasks.model import Task


def load_task_split(section: TasksSection) -> tuple[list[Task], list[Task]]:
    """`train` filtered by `include`; `val` when given, else `val_fraction` of train held out (of each
    `stratify_by` value, or whole `holdout_by` values)."""
    tasks = load_tasks(section.train)
    if section.include:
        tasks = [t for t in tasks if any(fnmatch.fnmatchcase(t.id, g) for g in section.include)]
        if not tasks:
            raise ValueError(f"tasks.include {section.include} matches no task in {section.train}")
    if section.val is not None:
        return tasks, load_tasks(section.val)
    if section.holdout_by is not None:
        return holdout_split(tasks, section.holdout_by, section.val_fraction, section.holdout_values,
                             seed=section.split_seed)
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


def holdout_split(tasks: list[Task], key: str, val_fraction: float, values: list[str] | None = None,
                  seed: int = 0) -> tuple[list[Task], list[Task]]:
    """Hold out whole values of metadata `key` (those matching a glob in `values`, else `val_fraction` of the
    distinct values, hash-ranked by `seed`): validation then holds kinds the training never saw. Tasks without
    the key form one value, `None`."""
    present = sorted({str(t.metadata.get(key)) for t in tasks})
    if values:
        held = {v for v in present if any(fnmatch.fnmatchcase(v, g) for g in values)}
        if not held:
            raise ValueError(f"tasks.holdout_values {values} match no {key!r} value (values: {present[:6]}...)")
    else:
        held = set(split_tasks(present, val_fraction, seed=seed, key=str)[1])
    if len(held) == len(present) and tasks:
        raise ValueError(f"tasks.holdout_by {key!r}: every value is held out, nothing is left to train on")
    return ([t for t in tasks if str(t.metadata.get(key)) not in held],
            [t for t in tasks if str(t.metadata.get(key)) in held])


def share_per_value(tasks: list[Task], fraction: float, key: str, seed: int = 0,
                    eligible: Callable[[Task], bool] = lambda t: True) -> tuple[list[Task], list[Task]]:
    """(rest, share): `fraction` of each value of metadata `key`, at least one of every value with 2 or more
    tasks (as `split_tasks` rounds), drawn among that value's `eligible` tasks by the split's hash of
    (seed, id), so the draw does not depend on input order. Raises when no task has `key` (a typo would
    otherwise make one group of all). Order within each side follows the input."""
    if not any(key in t.metadata for t in tasks):
        raise ValueError(f"no task has [metadata] {key!r}")
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(str(t.metadata.get(key)), []).append(t)
    picked: set[str] = set()
    for group in groups.values():
        n = round(len(group) * fraction)
        if n == 0 and fraction > 0 and len(group) >= 2:
            n = 1
        pool = [t for t in group if eligible(t)]
        picked.update(t.id for t in sorted(pool, key=lambda t: _rank(seed, t.id))[:n])
    return [t for t in tasks if t.id not in picked], [t for t in tasks if t.id in picked]


def _rank(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def whole_values(tasks: list[Task], fraction: float, key: str, seed: int = 0,
                 eligible: Callable[[Task], bool] = lambda t: True) -> tuple[list[Task], list[Task]]:
    """(rest, share): the `eligible` tasks of `fraction` of metadata `key`'s values (among the values with
    an eligible task; at least one value, hash-ranked by `seed` as `holdout_split` ranks them), and the other
    tasks. Raises when no task has `key`, or when the share would take every value. Order follows the input."""
    if not any(key in t.metadata for t in tasks):
        raise ValueError(f"no task has [metadata] {key!r}")
    values = sorted({str(t.metadata.get(key)) for t in tasks if eligible(t)})
    n = max(1, round(len(values) * fraction)) if values else 0
    chosen = set(sorted(values, key=lambda v: _rank(seed, v))[:n])
    if chosen and len(chosen) == len({str(t.metadata.get(key)) for t in tasks}):
        raise ValueError(f"{key!r}: a share of {fraction} takes every value ({len(chosen)}), none is left")
    share = {t.id for t in tasks if str(t.metadata.get(key)) in chosen and eligible(t)}
    return [t for t in tasks if t.id not in share], [t for t in tasks if t.id in share]
