"""`legorl eval` (pass@k of a scaffold + model over a task set) and `legorl infer` (keep the tasks a
model solves sometimes, write them as a new index). Imports stay light: the model loads in the run."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import typer

AGENT = typer.Option("builtin", "--agent", "-a", help="Scaffold: builtin, oracle, nop, ... or module:Class.")
MODEL = typer.Option(None, "--model", "-m", help="Model name/dir (embedded); with --base-url the served name.")
BASE_URL = typer.Option(None, "--base-url", help="OpenAI-compatible server instead (tokens are not captured).")
CONCURRENCY = typer.Option(8, "--concurrency", "-c", help="Trials in flight.")
TEMPERATURE = typer.Option(0.7, "--temperature", "-t", help="Sampling temperature.")
MAX_TURNS = typer.Option(10, "--max-turns", help="Model calls per trial.")
MAX_TOKENS = typer.Option(256, "--max-tokens", help="Tokens per model call.")
TIMEOUT = typer.Option(None, "--timeout", help="Agent timeout in seconds (default: the task's).")
BACKEND = typer.Option("local", "--backend", help="Sandbox backend: local, docker, kubernetes or module:Class.")
TASK_IDS = typer.Option(None, "--task", help="Only these task ids (repeatable; globs allowed).")
LIMIT = typer.Option(None, "--limit", help="Only the first N tasks.")
AGENT_OPT = typer.Option(None, "--agent-opt", help="Scaffold option key=value (repeatable; values parsed as JSON).")
SEED = typer.Option(0, "--seed", help="Engine seed.")
ENGINE = typer.Option("embedded", "--engine", help="embedded, or vllm (a vLLM server legorl starts; see docs/vllm.md).")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("infer")(infer_cmd)


def _fail(message: str) -> None:
    typer.echo(message.strip().splitlines()[0] if message.strip() else "error", err=True)
    raise typer.Exit(2)


def _load(path: str, task_ids: list[str] | None, limit: int | None) -> list[Any]:
    """The valid tasks of a set; each refused task is printed with its reasons (one bad task never
    stops the others); exits only when nothing valid is left."""
    from legorl.tasks.loader import collect_tasks

    try:
        tasks, problems = collect_tasks(path)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"{path}: {exc}")
    refused: dict[Any, list[str]] = {}
    for p in problems:
        if not p.warning:
            refused.setdefault(p.task_dir, []).append(f"{p.file}: {p.message}")
    if not tasks:  # nothing to run: one line saying why
        first = next(iter(refused.items()), None)
        _fail(f"{path}: no valid task" + (f" ({len(refused)} refused; {first[0]}: {first[1][0]})" if first else ""))
    for d, msgs in refused.items():
        typer.echo(f"refused {d}: " + "; ".join(msgs), err=True)
    if refused:
        typer.echo(f"{len(refused)} task(s) refused, {len(tasks)} valid (`legorl tasks validate` lists all)",
                   err=True)
    if task_ids:
        import fnmatch

        tasks = [t for t in tasks if any(fnmatch.fnmatchcase(t.id, p) for p in task_ids)]
    if limit is not None:
        tasks = tasks[: max(limit, 0)]
    if not tasks:
        _fail(f"{path}: no task selected")
    return tasks


def _agent_opts(opts: list[str] | None) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for o in opts or []:
        key, sep, val = o.partition("=")
        if not sep or not key:
            _fail(f"--agent-opt takes key=value, got {o!r}")
        try:
            out[key] = json.loads(val)
        except ValueError:
            out[key] = val
    return out


def _setup(agent: str, model: str | None, base_url: str | None, concurrency: int, temperature: float,
           max_turns: int, max_tokens: int, timeout: float | None, backend: str, agent_opt: list[str] | None,
           seed: int, output: Path | None, exp: str, engine: str = "embedded") -> tuple[Any, Any]:
    from legorl.agents.base import ScaffoldLimits
    from legorl.env import sandbox_class
    from legorl.workers.config import WorkerConfig
    from legorl.workers.evaluation import PolicySpec, scaffold_class

    checks = [(concurrency >= 1, "--concurrency must be >= 1"), (temperature >= 0, "--temperature must be >= 0"),
              (max_turns >= 1, "--max-turns must be >= 1"), (max_tokens >= 1, "--max-tokens must be >= 1"),
              (timeout is None or timeout > 0, "--timeout must be > 0"),
              (engine in ("embedded", "vllm"), "--engine must be embedded or vllm")]
    for ok, msg in checks:
        if not ok:
            _fail(msg)
    try:
        sandbox_class(backend)  # a registered name or an importable module:Class
    except ValueError as exc:
        _fail(f"--backend: {exc}")
    try:
        needs_model = getattr(scaffold_class(agent), "needs_model", True)
    except ValueError as exc:
        _fail(str(exc))
    if needs_model and base_url is None and model is not None:
        from legorl.models import ModelNotFoundError, resolve_model
        from legorl.models.store import REGISTRY

        try:
            if model not in REGISTRY:  # a registered name is prepared on first use
                resolve_model(model, prepare=False)
        except (ModelNotFoundError, ValueError, KeyError) as exc:
            _fail(f"--model: {exc}")
    limits = ScaffoldLimits(max_turns=max_turns, max_tokens_per_call=max_tokens, temperature=temperature)
    cfg = WorkerConfig(scaffold=agent, scaffold_kwargs=_agent_opts(agent_opt), limits=limits, backend=backend,
                       max_trials=concurrency, max_sandboxes=concurrency, max_scaffolds=concurrency,
                       agent_timeout_sec=timeout, output_root=output, exp_name=exp)
    if needs_model and base_url:
        typer.echo("note: --base-url: the server is used as is, tokens are not captured (eval only)", err=True)
    return cfg, PolicySpec(model=model, base_url=base_url, seed=seed, engine=engine)


def _run(tasks: list[Any], k: int, cfg: Any, policy: Any, title: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from legorl.workers.evaluation import evaluate, is_solved

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("solved {task.fields[solved]}"), TimeElapsedColumn(), transient=False) as bar:
        job = bar.add_task(title, total=len(tasks) * k, solved=0)
        solved = 0

        def done(r: Any) -> None:
            nonlocal solved
            solved += is_solved(r)
            bar.update(job, advance=1, solved=solved)

        return asyncio.run(evaluate(tasks, k, cfg, policy, done))


def _table(report: Any, k: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(report.tasks)} task(s) x {k} attempt(s)")
    ks = [1, k] if k > 1 else [1]
    for col in ("task", "solved", *(f"pass@{x}" for x in ks), "outcomes", "note"):
        table.add_column(col, overflow="fold")
    for s in report.tasks.values():
        outs = ", ".join(f"{o} {n}" for o, n in sorted(s.outcomes.items()))
        note = s.reasons[0][:80] if s.reasons else ""
        table.add_row(s.task_id, f"{s.solved}/{s.n}", *(f"{s.pass_at(x):.3f}" for x in ks), outs, note)
    console = Console()
    console.print(table)
    scores = "   ".join(f"pass@{x} = {report.mean_pass(x):.4f}" for x in ks)
    console.print(f"{scores}   outcomes: {dict(report.outcomes)}")


def eval_cmd(
    tasks_path: str = typer.Argument(..., metavar="TASKS", help="Task dir, dir of task dirs, index or builtin:<set>."),
    agent: str = AGENT, model: str | None = MODEL, base_url: str | None = BASE_URL,
    k: int = typer.Option(1, "-k", help="Attempts per task (pass@k)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write results.json and trial artifacts here."),
    concurrency: int = CONCURRENCY, temperature: float = TEMPERATURE, max_turns: int = MAX_TURNS,
    max_tokens: int = MAX_TOKENS, timeout: float | None = TIMEOUT, backend: str = BACKEND,
    task: list[str] | None = TASK_IDS, limit: int | None = LIMIT, agent_opt: list[str] | None = AGENT_OPT,
    seed: int = SEED, engine: str = ENGINE,
) -> None:
    """Run a scaffold + model over a task set, k attempts per task; report pass@1 and pass@k."""
    if k < 1:
        _fail("-k must be >= 1")
    tasks = _load(tasks_path, task, limit)
    cfg, policy = _setup(agent, model, base_url, concurrency, temperature, max_turns, max_tokens, timeout,
                         backend, agent_opt, seed, output, "eval", engine)
    report = _run(tasks, k, cfg, policy, f"eval {agent}")
    _table(report, k)
    if output is not None:
        typer.echo(f"wrote {report.write(output)}")


def parse_band(band: str, n: int) -> tuple[int, int]:
    """'1..N-1' (N may appear, +/- constants) -> (1, n - 1); ValueError when malformed or empty."""
    m = re.fullmatch(r"\s*([^.]+?)\s*\.\.\s*([^.]+?)\s*", band)
    if not m:
        raise ValueError(f"--band takes LO..HI (e.g. 1..N-1), got {band!r}")

    def value(expr: str) -> int:
        e = expr.replace(" ", "")
        mm = re.fullmatch(r"(N|\d+)(?:([+-])(\d+))?", e)
        if not mm:
            raise ValueError(f"--band: cannot read {expr!r} (use a number, N or N-1)")
        base = n if mm.group(1) == "N" else int(mm.group(1))
        off = int(mm.group(3) or 0)
        return base + off if mm.group(2) == "+" else base - off

    lo, hi = value(m.group(1)), value(m.group(2))
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"--band {band!r} means {lo}..{hi}: need 0 <= LO <= HI <= N={n}")
    return lo, hi


def infer_cmd(
    tasks_path: str = typer.Argument(..., metavar="TASKS", help="Task dir, dir of task dirs, index or builtin:<set>."),
    n: int = typer.Option(8, "-n", help="Trials per task."),
    band: str = typer.Option("1..N-1", "--band", help="Keep tasks solved LO..HI times out of N (inclusive)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output index (.parquet)."),
    agent: str = AGENT, model: str | None = MODEL, base_url: str | None = BASE_URL,
    output: Path | None = typer.Option(None, "--output", help="Also write results.json and trial artifacts here."),
    concurrency: int = CONCURRENCY, temperature: float = typer.Option(1.0, "--temperature", "-t"),
    max_turns: int = MAX_TURNS, max_tokens: int = MAX_TOKENS, timeout: float | None = TIMEOUT,
    backend: str = BACKEND, task: list[str] | None = TASK_IDS, limit: int | None = LIMIT,
    agent_opt: list[str] | None = AGENT_OPT, seed: int = SEED, engine: str = ENGINE,
) -> None:
    """Keep the tasks whose solve count out of N lies in the band (they give RL a signal); write an index."""
    from legorl.tasks.filter import PassRateFilter
    from legorl.tasks.index import build_index

    if n < 1:
        _fail("-n must be >= 1")
    try:
        lo, hi = parse_band(band, n)
    except ValueError as exc:
        _fail(str(exc))
    if out.suffix != ".parquet":
        _fail(f"-o {out}: the index must be a .parquet file")
    tasks = _load(tasks_path, task, limit)
    cfg, policy = _setup(agent, model, base_url, concurrency, temperature, max_turns, max_tokens, timeout,
                         backend, agent_opt, seed, output, "infer", engine)
    report = _run(tasks, n, cfg, policy, f"infer {agent}")
    _table(report, n)
    # The band in solve counts is the pass-rate filter's open interval on the mean, half a count wider.
    rates = PassRateFilter(window=n, min_attempts=n, low=(lo - 0.5) / n, high=(hi + 0.5) / n, revisit=0.0)
    for r in report.results:
        rates.record(r.spec.task.id, [1.0 if r.reward is not None and r.reward >= 1.0 else 0.0])
    kept = rates.filter(tasks)
    if output is not None:
        report.write(output)
    build_index(kept, out)
    typer.echo(f"kept {len(kept)}/{len(tasks)} task(s) solved {lo}..{hi} of {n} times; wrote {out}")
