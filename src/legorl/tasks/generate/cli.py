"""`legorl tasks generate OUT_DIR --n N --seed S [--kinds GLOB...]` (registered by legorl.tasks.cli)."""

from __future__ import annotations

from pathlib import Path

import typer


def generate_cmd(
    out: Path = typer.Argument(..., help="Directory to write the task dirs into (must be empty or new)."),
    n: int = typer.Option(None, "--n", help="Tasks to make (kinds round robin). Default: 3 per selected kind."),
    seed: int = typer.Option(0, help="Seed of every drawn value; the same seed makes the same tasks."),
    kinds: list[str] = typer.Option(None, "--kinds", help="Kind globs, repeatable or comma-separated "
                                    "(`json-*`, `*-delete`, `count-write`). Default: all."),
    set_name: str = typer.Option("look-act", "--set", help="[metadata] set and source of the tasks."),
    overwrite: bool = typer.Option(False, help="Replace a non-empty OUT_DIR."),
    list_kinds: bool = typer.Option(False, "--list", help="Print the selected kinds (source, action, type) and exit."),
    check: bool = typer.Option(False, help="Then prove each task in a real sandbox: no-op 0, blind commands 0, "
                               "oracle 1, demonstration 1 (exit 2 on any failure)."),
    jobs: int = typer.Option(2, "-j", "--jobs", help="Sandbox sessions at once for --check."),
    phrasings: bool = typer.Option(False, help="Word each task's request in one of several ways (drawn per task), "
                                   "so a kind's tasks do not share one sentence. Off: one wording per action."),
) -> None:
    """Generate look-then-act tasks: a value hidden in the sandbox x an action on it (docs/tasks.md)."""
    from legorl.tasks.generate.kinds import select_kinds
    from legorl.tasks.generate.render import generate

    try:
        chosen = select_kinds(kinds or None)
        if list_kinds:
            for k in chosen:
                typer.echo(f"{k.name}\t{k.source}\t{k.action}\t{k.value_type}")
            typer.echo(f"{len(chosen)} kind(s)")
            return
        specs = generate(out, n or 3 * len(chosen), seed, kinds or None, set_name=set_name, overwrite=overwrite,
                         phrasings=phrasings)
    except (ValueError, FileExistsError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {len(specs)} task(s) of {len({s.kind for s in specs})} kind(s) under {out}")
    if check:
        run_check(out, jobs)


def run_check(out: Path, jobs: int) -> None:
    """Print a line per failing task and one summary line with the attempt counts."""
    import asyncio
    import time

    from legorl.tasks.generate.check import check_generated
    from legorl.tasks.loader import load_tasks

    t0 = time.perf_counter()
    results = asyncio.run(check_generated(load_tasks(out), concurrency=jobs))
    bad = [r for r in results if not r.ok]
    for r in bad:
        typer.echo(f"{r.task_id}: {r.error or r.wrong}")
    blind = sum(len(r.rewards) - 3 for r in results if "oracle" in r.rewards)
    typer.echo(f"checked {len(results)} task(s) in {time.perf_counter() - t0:.0f} s: {len(results) - len(bad)} ok "
               f"(no-op 0, {blind} blind commands 0, oracle 1, demonstration 1), {len(bad)} failed")
    if bad:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_cmd)
