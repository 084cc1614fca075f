"""`legorl tasks ...`: validate, index, list, convert and browse task sets (no heavy imports)."""

from __future__ import annotations

from pathlib import Path

import typer

tasks_app = typer.Typer(help="Task sets: validate, index, list, convert, built-ins.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")


def _register_generate() -> None:
    from legorl.tasks.generate.cli import register as register_generate

    register_generate(tasks_app)


def _fail(message: object, code: int = 2) -> None:
    if isinstance(message, KeyError) and message.args:  # str(KeyError) adds quotes
        message = message.args[0]
    typer.echo(str(message), err=True)
    raise typer.Exit(code)


@tasks_app.command("validate")
def validate_cmd(
    paths: list[str] = typer.Argument(..., help="Task dir(s), dirs of task dirs, index.parquet or builtin:<set>."),
    strict: bool = typer.Option(False, help="Treat unknown task.toml keys as errors (default: WARN)."),
) -> None:
    """Check task dirs; print every problem and warning (one per line); exit 2 if there are errors."""
    import logging

    from legorl.tasks.loader import collect_tasks

    logging.getLogger("legorl.tasks.taskdir").setLevel(logging.ERROR)  # warnings are printed below

    total, problems = 0, []
    for path in paths:
        try:
            tasks, probs = collect_tasks(path, strict=strict)
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{path}: {exc.args[0] if isinstance(exc, KeyError) else exc}")
            continue
        total += len(tasks)
        problems.extend(probs)
    for p in problems:
        typer.echo(p.full() if hasattr(p, "full") else p)
    bad = [p for p in problems if not getattr(p, "warning", False)]
    warned = len(problems) - len(bad)
    if bad:
        n_bad = len({getattr(p, "task_dir", p) for p in bad})
        _fail(f"{len(bad)} problem(s) in {n_bad} task(s); {total} valid task(s); {warned} warning(s)")
    typer.echo(f"ok: {total} valid task(s)" + (f", {warned} warning(s)" if warned else ""))


@tasks_app.command("index")
def index_cmd(
    paths: list[str] = typer.Argument(..., help="Task dirs, dirs of task dirs or builtin:<set>."),
    out: Path = typer.Option(..., "-o", "--out", help="Output index (.parquet)."),
    split: str | None = typer.Option(None, help="Hold out a validation split, e.g. val=0.2."),
    seed: int = typer.Option(0, help="Seed of the deterministic split."),
    source: str | None = typer.Option(None, help="Source label for tasks that do not name one."),
) -> None:
    """Write a parquet index of task pointers (path, instance_id, source, split)."""
    from legorl.tasks.index import build_index, parse_split
    from legorl.tasks.loader import TaskValidationError, load_tasks

    try:
        frac = parse_split(split) if split else 0.0
        tasks = [t for p in paths for t in load_tasks(p, source=source)]
        entries = build_index(tasks, out, val_fraction=frac, seed=seed)
    except TaskValidationError as exc:
        for p in exc.problems:
            typer.echo(p.full())
        _fail(f"not indexed: {len(exc.problems)} problem(s)")
    except (ValueError, KeyError) as exc:
        _fail(exc)
    n_val = sum(e.split == "val" for e in entries)
    typer.echo(f"wrote {out}: {len(entries)} task(s) ({len(entries) - n_val} train, {n_val} val)")


@tasks_app.command("list")
def list_cmd(
    path: str = typer.Argument(..., help="index.parquet, task dir(s) dir, or builtin:<set>."),
    split: str | None = typer.Option(None, help="Only this split (index only)."),
) -> None:
    """Show tasks as a table."""
    from rich.console import Console
    from rich.table import Table

    from legorl.tasks.index import read_index
    from legorl.tasks.loader import TaskValidationError, load_tasks

    table = Table(show_lines=False)
    try:
        p = Path(path)
        splits: dict[str, str] = {}
        if p.suffix == ".parquet":
            entries = read_index(p, split)
            splits = {e.instance_id: e.split for e in entries}
            from legorl.tasks.index import load_index_tasks

            tasks = load_index_tasks(p, split)
        else:
            tasks = load_tasks(path)
    except TaskValidationError as exc:
        for prob in exc.problems:
            typer.echo(prob.full())
        _fail(f"{len(exc.problems)} problem(s)")
    except (OSError, ValueError, KeyError) as exc:
        _fail(exc)
    console = Console()
    id_width = min(max((len(t.id) for t in tasks), default=2), 40)
    table.add_column("id", no_wrap=True, min_width=id_width)
    src_width = max((len(t.source) for t in tasks), default=6)
    table.add_column("source", no_wrap=True, min_width=src_width)
    table.add_column("split", no_wrap=True, min_width=5)
    table.add_column("agent s", no_wrap=True, justify="right", min_width=7)
    table.add_column("instruction", no_wrap=True, overflow="ellipsis")
    for t in tasks:
        first = next((ln.strip() for ln in t.instruction.splitlines() if ln.strip()), "")
        room = max(20, console.width - id_width - src_width - 5 - 7 - 16)  # 16: borders and padding
        text = first if len(first) <= room else first[: room - 1] + "…"
        table.add_row(t.id, t.source, splits.get(t.id, "-"), f"{t.agent_timeout_sec:g}", text)
    console.print(table)
    typer.echo(f"{len(tasks)} task(s)")


@tasks_app.command("builtin")
def builtin_cmd() -> None:
    """List the built-in task sets (load one with builtin:<set>)."""
    from rich.console import Console
    from rich.table import Table

    from legorl.tasks.builtin_sets import DESCRIPTIONS, builtin_count, builtin_sets, generated_sets
    from legorl.tasks.generate.builtin import GENERATED

    table = Table()
    for col in ("set", "tasks", "description"):
        table.add_column(col)
    for name in builtin_sets():
        table.add_row(f"builtin:{name}", str(builtin_count(name)), DESCRIPTIONS.get(name, ""))
    for name in generated_sets():
        table.add_row(f"builtin:{name}", str(builtin_count(name)), GENERATED[name].description)
    Console().print(table)


@tasks_app.command("convert")
def convert_cmd(
    records: Path = typer.Argument(..., help="SWE-bench-style records (.jsonl, or .json holding a list)."),
    out: Path = typer.Option(..., "-o", "--out", help="Directory to write task dirs into."),
    source: str = typer.Option("converted", help="[metadata].source written into each task."),
    overwrite: bool = typer.Option(False, help="Replace task dirs that already exist."),
    check: bool = typer.Option(False, help="Then run each task's oracle and a no-op in local sandboxes."),
) -> None:
    """Turn SWE-bench-style records into Harbor task dirs with a fail/pass-to-pass verifier."""
    from legorl.tasks.convert import ConversionError, convert_file

    try:
        dirs = convert_file(records, out, source=source, overwrite=overwrite)
    except ConversionError as exc:
        _fail(exc)
    typer.echo(f"wrote {len(dirs)} task(s) under {out}")
    if check:
        check_cmd([str(d) for d in dirs], backend="local", jobs=2)


@tasks_app.command("check")
def check_cmd(
    paths: list[str] = typer.Argument(..., help="Task dirs, dirs of task dirs, index.parquet or builtin:<set>."),
    backend: str = typer.Option("local", help="Sandbox backend (local, docker, kubernetes)."),
    jobs: int = typer.Option(2, "-j", "--jobs", help="Tasks checked at once."),
) -> None:
    """Run each task's oracle and a no-op in real sandboxes; exit 2 unless oracle=1 and no-op=0 everywhere."""
    import asyncio

    from legorl.tasks.check import check_tasks
    from legorl.tasks.loader import TaskValidationError, load_tasks

    try:
        tasks = [t for p in paths for t in load_tasks(p)]
    except TaskValidationError as exc:
        for p in exc.problems:
            typer.echo(p.full())
        _fail(f"{len(exc.problems)} problem(s)")
    except (OSError, ValueError, KeyError) as exc:
        _fail(exc)
    results = asyncio.run(check_tasks(tasks, backend=backend, concurrency=jobs))
    bad = [r for r in results if not r.ok]
    for r in bad:
        typer.echo(f"{r.task_id}: {r.problem}")
    if bad:
        _fail(f"{len(bad)} of {len(results)} task(s) failed the oracle/no-op check")
    typer.echo(f"ok: {len(results)} task(s) score 1 with the oracle and 0 untouched")


_register_generate()
