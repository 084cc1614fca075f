"""A thin parquet index of task pointers: one row per task (path, instance_id, source, split).

The index holds no task content, so it stays tiny and a task edited on disk is picked up on the
next load. Paths under the index's own directory are stored relative to it, so a dataset folder
with its index can be moved or copied as one unit.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from legorl.tasks.model import Task
from legorl.tasks.taskdir import Problem, TaskValidationError, errors, read_task

T = TypeVar("T")
COLUMNS = ("path", "instance_id", "source", "split")


@dataclass(frozen=True)
class IndexEntry:
    path: Path
    instance_id: str
    source: str
    split: str


def split_tasks(
    tasks: Sequence[T], val_fraction: float, seed: int = 0, key: Callable[[T], str] | None = None
) -> tuple[list[T], list[T]]:
    """Deterministic (train, val) holdout.

    Each task is ranked by a hash of (seed, id), so a task's side does not depend on input order,
    and adding tasks to a set moves few existing ones. Order within each side follows the input.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    key = key or (lambda t: t.id)  # type: ignore[attr-defined]
    n_val = round(len(tasks) * val_fraction)
    if val_fraction > 0 and n_val == 0 and len(tasks) >= 2:
        n_val = 1
    ranked = sorted(range(len(tasks)), key=lambda i: hashlib.sha256(f"{seed}:{key(tasks[i])}".encode()).hexdigest())
    val_idx = set(ranked[:n_val])
    train = [t for i, t in enumerate(tasks) if i not in val_idx]
    val = [t for i, t in enumerate(tasks) if i in val_idx]
    return train, val


def parse_split(spec: str) -> float:
    """'val=0.2' (or plain '0.2') -> 0.2."""
    name, _, value = spec.partition("=") if "=" in spec else ("val", "=", spec)
    if name != "val":
        raise ValueError(f"--split takes val=FRACTION, got {spec!r}")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--split fraction must be a number, got {value!r}") from None


def build_index(
    tasks: Iterable[Task], out: str | Path, val_fraction: float = 0.0, seed: int = 0
) -> list[IndexEntry]:
    """Write the parquet index for `tasks` and return its rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks = list(tasks)
    ids = [t.id for t in tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate task ids, an index needs unique ids: {', '.join(dupes)}")
    _, val = split_tasks(tasks, val_fraction, seed)
    val_ids = {t.id for t in val}
    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    entries = [
        IndexEntry(t.path, t.id, t.source, "val" if t.id in val_ids else "train") for t in tasks
    ]
    table = pa.table({
        "path": [_store_path(e.path, out.parent) for e in entries],
        "instance_id": [e.instance_id for e in entries],
        "source": [e.source for e in entries],
        "split": [e.split for e in entries],
    })
    pq.write_table(table, out)
    return entries


def _store_path(path: Path, base: Path) -> str:
    path = path.resolve()
    if path.is_relative_to(base):
        return os.path.relpath(path, base)
    return str(path)


def read_index(index: str | Path, split: str | None = None) -> list[IndexEntry]:
    """Rows of an index (optionally one split), with paths resolved to absolute."""
    import pyarrow.parquet as pq

    index = Path(index).expanduser().resolve()
    table = pq.read_table(index)
    missing = [c for c in ("path", "instance_id") if c not in table.column_names]
    if missing:
        raise ValueError(f"{index}: not a task index, missing column(s) {', '.join(missing)}")
    cols = table.to_pydict()
    n = table.num_rows
    rows = [
        IndexEntry(
            path=(index.parent / cols["path"][i]).resolve(),
            instance_id=cols["instance_id"][i],
            source=(cols.get("source") or ["local"] * n)[i] or "local",
            split=(cols.get("split") or ["train"] * n)[i] or "train",
        )
        for i in range(n)
    ]
    return [r for r in rows if split is None or r.split == split]


def load_index_tasks(index: str | Path, split: str | None = None, strict: bool = False) -> list[Task]:
    """Load every task an index points to; all problems are reported together."""
    tasks, problems = collect_index_tasks(index, split, strict)
    if errors(problems):
        raise TaskValidationError(errors(problems))
    return tasks


def collect_index_tasks(index: str | Path, split: str | None = None,
                        strict: bool = False) -> tuple[list[Task], list[Problem]]:
    tasks: list[Task] = []
    problems: list[Problem] = []
    for entry in read_index(index, split):
        task, probs = read_task(entry.path, source=entry.source, strict=strict)
        problems.extend(probs)
        if task is None:
            continue
        if task.id != entry.instance_id:
            problems.append(Problem(entry.path, "task.toml",
                                    f"task id {task.id!r} differs from the index's {entry.instance_id!r}"))
            continue
        tasks.append(task)
    return tasks, problems
