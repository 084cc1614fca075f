"""`legorl compare`: two evaluations of the same tasks, paired per task.

Two models scored on the same tasks differ less noisily per task than their means suggest: a task both solve
(or both fail) adds nothing to the difference. The gain is the mean over the shared tasks of the difference
in per-task pass@1 (after - before), its standard error the SD of those differences over sqrt(n), which is
how the docs' paired figures are computed (docs/agent-lookact.md).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import typer


@dataclass(frozen=True)
class Paired:
    """One paired comparison: `n` shared tasks, pass@1 before and after, the gain and its SE (fractions)."""

    name: str
    n: int
    before: float
    after: float
    gain: float
    se: float | None  # None for a single task

    def line(self) -> str:
        se = "" if self.se is None else f" (SE {100 * self.se:.1f})"
        return f"{self.name}: {self.n} task{'' if self.n == 1 else 's'}, pass@1 {self.before:.3f} -> {self.after:.3f}, {100 * self.gain:+.1f}{se}"


def load_pass1(path: Path) -> dict[str, float]:
    """Per-task pass@1 from what `legorl eval -o DIR` wrote: DIR or DIR/results.json."""
    file = path / "results.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
        return {task: float(row["pass@1"]) for task, row in data["tasks"].items()}
    except FileNotFoundError as exc:
        raise ValueError(f"{file}: no such file (give a `legorl eval -o DIR` folder or its results.json)") from exc
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{file}: not a results.json of `legorl eval -o` ({type(exc).__name__}: {exc})") from exc


def paired(name: str, before: dict[str, float], after: dict[str, float], tasks: list[str]) -> Paired:
    diffs = [after[t] - before[t] for t in tasks]
    n = len(diffs)
    gain = sum(diffs) / n
    se = math.sqrt(sum((d - gain) ** 2 for d in diffs) / (n - 1) / n) if n > 1 else None
    return Paired(name, n, sum(before[t] for t in tasks) / n, sum(after[t] for t in tasks) / n, gain, se)


def compare(before: dict[str, float], after: dict[str, float], group: str | None = None) -> list[Paired]:
    """The paired comparison over the tasks both hold ("all"), then one per group: `group` is a regular
    expression searched in each task id, its first capture group (or whole match) naming the task's group;
    tasks it does not match go to "(other)"."""
    shared = sorted(set(before) & set(after))
    if not shared:
        raise ValueError("the two evaluations share no task id: compare evaluations of the same tasks")
    out = [paired("all", before, after, shared)]
    if group is not None:
        try:
            rx = re.compile(group)
        except re.error as exc:
            raise ValueError(f"--group {group!r}: not a regular expression ({exc})") from exc
        groups: dict[str, list[str]] = defaultdict(list)
        for t in shared:
            m = rx.search(t)
            groups[(m.group(1) if rx.groups else m.group(0)) if m else "(other)"].append(t)
        out += [paired(g, before, after, ts) for g, ts in sorted(groups.items())]
    return out


def compare_cmd(
    before: Path = typer.Argument(..., help="The baseline: a `legorl eval -o DIR` folder or its results.json."),
    after: Path = typer.Argument(..., help="The model to compare with it, evaluated on the same tasks."),
    group: str | None = typer.Option(
        None, "--group", "-g",
        help="Also compare per group of task ids: a regular expression whose first capture group (or match) names "
             "a task's group, e.g. '^([a-z]+)-' for the look-act source.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the comparisons as JSON lines."),
) -> None:
    """Paired per task: the mean difference in pass@1 between two evaluations of the same tasks, with its SE.

    legorl eval --config examples/agent-lookact.toml -m WARM -k 4 -o before/
    legorl eval --config examples/agent-lookact.toml -m RL -k 4 -o after/
    legorl compare before/ after/ --group '^([a-z]+)-'
    """
    try:
        a, b = load_pass1(before), load_pass1(after)
        rows = compare(a, b, group)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    only = len(set(a) ^ set(b))
    for r in rows:
        typer.echo(json.dumps(asdict(r)) if as_json else r.line())
    if only:
        typer.echo(f"note: {only} task(s) are in only one of the two evaluations and are left out", err=True)
