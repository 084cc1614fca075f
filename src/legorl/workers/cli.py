"""`legorl eval` (pass@k of a scaffold + model over a task set) and `legorl infer` (keep the tasks a
model solves sometimes, write them as a new index). Imports stay light: the model loads in the run."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import typer

AGENT = typer.Option(None, "--agent", "-a", help="Scaffold: builtin, oracle, nop, ... or module:Class. (default: builtin)")
MODEL = typer.Option(None, "--model", "-m", help="Model name/dir (embedded); with --base-url the served name.")
BASE_URL = typer.Option(None, "--base-url", help="OpenAI-compatible server instead (tokens are not captured).")
CONCURRENCY = typer.Option(None, "--concurrency", "-c", help="Trials in flight. (default: 8)")
TEMPERATURE = typer.Option(None, "--temperature", "-t", help="Sampling temperature. (default: 0.7)")
MAX_TURNS = typer.Option(None, "--max-turns", help="Model calls per trial. (default: 10)")
MAX_TOKENS = typer.Option(None, "--max-tokens", help="Tokens per model call. (default: 256)")
TIMEOUT = typer.Option(None, "--timeout", help="Agent timeout in seconds (default: the task's).")
BACKEND = typer.Option(None, "--backend",
                       help="Sandbox backend: local, docker, kubernetes or module:Class. (default: local)")
TASK_IDS = typer.Option(None, "--task", help="Only these task ids (repeatable; globs allowed).")
LIMIT = typer.Option(None, "--limit", help="Only the first N tasks.")
AGENT_OPT = typer.Option(None, "--agent-opt", help="Scaffold option key=value (repeatable; values parsed as JSON).")
SEED = typer.Option(None, "--seed", help="Engine seed. (default: 0)")
ENGINE = typer.Option(None, "--engine",
                      help="embedded, or vllm (a vLLM server legorl starts, or the servers a --config run's "
                           "serving.vllm.urls names; see docs/vllm.md). (default: embedded)")
RUN_CONFIG = typer.Option(None, "--config", help=(
    "A run config (legorl train's TOML): its model, serving (engine, device, dtype, KV budget), agent (scaffold, "
    "kwargs, timeouts), sandbox and rollout (temperature, turns, tokens, concurrency) settings, so the base "
    "model is measured as the run will sample it; flags given here override them. TASKS defaults to its tasks "
    "(--split)."))
OVERRIDE = typer.Option(None, "--override", "-O", help=(
    "With --config: a KEY=VALUE override of it, as `legorl train` takes them (repeatable), so a run trained with "
    "overrides is measured on its own tasks: -O tasks.train=builtin:look-act-phrased."))
SPLIT = typer.Option("val", "--split", help="With --config and no TASKS: the run's held-out tasks (val), its "
                     "training tasks (train) or both (all).")
NO_PROGRESS = typer.Option(False, "--no-progress",
                           help="No live bar: one plain line at each tenth of the trials (for logs and CI).")
TASKS_ARG = typer.Argument(None, metavar="[TASKS]", help=(
    "Task dir, dir of task dirs, index or builtin:<set> (optional with --config: the run's tasks)."))


@dataclass
class Flags:
    """The flags `eval` and `infer` share; None: not given (the run config's value, else the default)."""

    agent: str | None = None
    model: str | None = None
    base_url: str | None = None
    concurrency: int | None = None
    temperature: float | None = None
    max_turns: int | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    backend: str | None = None
    agent_opt: list[str] | None = None
    seed: int | None = None
    engine: str | None = None
    output: Path | None = None


DEFAULTS = dict(agent="builtin", concurrency=8, temperature=0.7, max_turns=10, max_tokens=256, backend="local",
                seed=0, engine="embedded")


def register(app: typer.Typer) -> None:
    from legorl.workers.compare import compare_cmd

    app.command("eval")(eval_cmd)
    app.command("compare")(compare_cmd)
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
    return _select(tasks, path, task_ids, limit)


def _select(tasks: list[Any], path: str, task_ids: list[str] | None, limit: int | None) -> list[Any]:
    if task_ids:
        import fnmatch

        tasks = [t for t in tasks if any(fnmatch.fnmatchcase(t.id, p) for p in task_ids)]
    if limit is not None:
        tasks = tasks[: max(limit, 0)]
    if not tasks:
        _fail(f"{path}: no task selected")
    return tasks


def _run_config(path: Path | None, overrides: list[str] | None = None) -> Any:
    """The run config `--config` names with its `--override`s (None without one); a bad one exits 2 with its
    first problem."""
    if path is None:
        if overrides:
            _fail("--override changes a run config: give --config RUN.toml too")
        return None
    from legorl.config import ConfigError, load_config

    try:
        return load_config(path, overrides)
    except ConfigError as exc:  # a missing file, bad TOML, invalid values or overrides: one line, exit 2
        _fail(f"--config {path}: {exc}")


def _tasks(path: str | None, run_cfg: Any, split: str, task_ids: list[str] | None, limit: int | None) -> list[Any]:
    """TASKS when given, else the run config's tasks of `split`."""
    if path is not None:
        return _load(path, task_ids, limit)
    if run_cfg is None:
        _fail("give TASKS (a task dir, index or builtin:<set>) or --config RUN.toml")
    if split not in ("val", "train", "all"):
        _fail(f"--split must be val, train or all, got {split!r}")
    from legorl.tasks.split import load_task_split

    try:
        train, val = load_task_split(run_cfg.tasks)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"--config: tasks: {exc}")
    chosen = {"val": val, "train": train, "all": [*train, *val]}[split]
    if not chosen:
        _fail(f"--config: the run has no {split} tasks (tasks.val_fraction / tasks.val)")
    return _select(chosen, f"{run_cfg.tasks.train} ({split})", task_ids, limit)


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


def _setup(f: Flags, run_cfg: Any, exp: str) -> tuple[Any, Any]:
    """The worker settings and the policy: the run config's (when given) under the flags given."""
    from legorl.env import sandbox_class
    from legorl.runtime.inprocess import PolicySpec
    from legorl.workers.evaluation import scaffold_class

    base = _from_run_config(run_cfg, f.output, exp) if run_cfg is not None else None
    pick = {k: getattr(f, k) if getattr(f, k) is not None else (base[1][k] if base else DEFAULTS[k])
            for k in DEFAULTS}
    checks = [(pick["concurrency"] >= 1, "--concurrency must be >= 1"),
              (pick["temperature"] >= 0, "--temperature must be >= 0"),
              (pick["max_turns"] >= 1, "--max-turns must be >= 1"), (pick["max_tokens"] >= 1, "--max-tokens must be >= 1"),
              (f.timeout is None or f.timeout > 0, "--timeout must be > 0"),
              (pick["engine"] in ("embedded", "vllm"), "--engine must be embedded or vllm")]
    for ok, msg in checks:
        if not ok:
            _fail(msg)
    try:
        sandbox_class(pick["backend"])  # a registered name or an importable module:Class
    except ValueError as exc:
        _fail(f"--backend: {exc}")
    try:
        needs_model = getattr(scaffold_class(pick["agent"]), "needs_model", True)
    except ValueError as exc:
        _fail(str(exc))
    model = f.model or (run_cfg.model.path if run_cfg is not None and f.base_url is None else None)
    if needs_model and f.base_url is None and model is not None:
        from legorl.models import ModelNotFoundError, resolve_model
        from legorl.models.store import REGISTRY

        try:
            if model not in REGISTRY:  # a registered name is prepared on first use
                resolve_model(model, prepare=False)
        except (ModelNotFoundError, ValueError, KeyError) as exc:
            _fail(f"--model: {exc}")
    cfg = base[0] if base else _worker_defaults(f.output, exp)
    same_agent = base is not None and pick["agent"] == cfg.scaffold
    n = pick["concurrency"]
    cfg = replace(cfg, scaffold=pick["agent"],
                  scaffold_kwargs={**(cfg.scaffold_kwargs if same_agent else {}), **_agent_opts(f.agent_opt)},
                  harnesses=cfg.harnesses if same_agent and not f.agent_opt else [],
                  limits=replace(cfg.limits, max_turns=pick["max_turns"], max_tokens_per_call=pick["max_tokens"],
                                 temperature=pick["temperature"]),
                  backend=pick["backend"], max_trials=n, max_sandboxes=n, max_scaffolds=n,
                  agent_timeout_sec=f.timeout if f.timeout is not None else cfg.agent_timeout_sec)
    if needs_model and f.base_url:
        typer.echo("note: --base-url: the server is used as is, tokens are not captured (eval only)", err=True)
    serving = run_cfg.serving if run_cfg is not None else None
    policy = PolicySpec(model=model, base_url=f.base_url, seed=pick["seed"], engine=pick["engine"])
    if serving is not None:
        ro = run_cfg.rollout
        policy = replace(policy, kv_budget_tokens=serving.kv_budget_tokens, tool_parser=run_cfg.agent.tool_parser,
                         max_model_len=ro.max_prompt_len + ro.max_response_len, device=serving.device,
                         dtype=serving.dtype, n_replicas=serving.n_replicas,
                         threads_per_replica=serving.threads_per_replica,
                         decode_attention=serving.decode_attention, decode_linear=serving.decode_linear,
                         vllm=serving.vllm)
    return cfg, policy


def _worker_defaults(output: Path | None, exp: str) -> Any:
    from legorl.workers.config import WorkerConfig

    return WorkerConfig(output_root=output, exp_name=exp)


def _from_run_config(run_cfg: Any, output: Path | None, exp: str) -> tuple[Any, dict[str, Any]]:
    """A run's worker settings and its values for the shared flags."""
    from legorl.workers.config import worker_config

    cfg = replace(worker_config(run_cfg, output), exp_name=exp)
    ro, val_t = run_cfg.rollout, run_cfg.trainer.val_temperature
    measure = exp == "eval" and val_t is not None  # eval measures as the run's validation samples
    return cfg, dict(agent=run_cfg.agent.name, concurrency=ro.concurrency, temperature=val_t if measure else ro.temperature,
                     max_turns=ro.max_turns, max_tokens=ro.max_response_len, backend=run_cfg.sandbox.backend,
                     seed=run_cfg.run.seed, engine=run_cfg.serving.engine)


def _run(tasks: list[Any], k: int, cfg: Any, policy: Any, title: str, progress: bool = True) -> Any:
    """Every trial of `tasks` x `k`: a live bar, or with `progress` off (logs, CI) one plain line at each tenth
    of the trials."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from legorl.workers.evaluation import evaluate, is_solved

    total = len(tasks) * k
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("solved {task.fields[solved]}"), TimeElapsedColumn(), transient=False,
                  disable=not progress) as bar:
        job = bar.add_task(title, total=total, solved=0)
        solved = finished = 0
        t0 = time.monotonic()

        def done(r: Any) -> None:
            nonlocal solved, finished
            solved += is_solved(r)
            finished += 1
            bar.update(job, advance=1, solved=solved)
            if not progress and finished * 10 // total > (finished - 1) * 10 // total:  # a new tenth (the last one too)
                typer.echo(f"{title}: {finished}/{total} trials, {solved} solved ({time.monotonic() - t0:.0f} s)")

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
    tasks_path: str | None = TASKS_ARG,
    agent: str | None = AGENT, model: str | None = MODEL, base_url: str | None = BASE_URL,
    k: int = typer.Option(1, "-k", help="Attempts per task (pass@k)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write results.json and trial artifacts here."),
    concurrency: int | None = CONCURRENCY, temperature: float | None = TEMPERATURE, max_turns: int | None = MAX_TURNS,
    max_tokens: int | None = MAX_TOKENS, timeout: float | None = TIMEOUT, backend: str | None = BACKEND,
    task: list[str] | None = TASK_IDS, limit: int | None = LIMIT, agent_opt: list[str] | None = AGENT_OPT,
    seed: int | None = SEED, engine: str | None = ENGINE, config: Path | None = RUN_CONFIG,
    override: list[str] | None = OVERRIDE, split: str = SPLIT, no_progress: bool = NO_PROGRESS,
) -> None:
    """Run a scaffold + model over a task set, k attempts per task; report pass@1 and pass@k.

    With --config RUN.toml, the base model as that run samples it (its scaffold and prompts, limits and
    engine, at its trainer.val_temperature when set), on its held-out tasks unless TASKS is given:
    legorl eval --config examples/agent.toml -k 4
    """
    if k < 1:
        _fail("-k must be >= 1")
    run_cfg = _run_config(config, override)
    tasks = _tasks(tasks_path, run_cfg, split, task, limit)
    flags = Flags(agent, model, base_url, concurrency, temperature, max_turns, max_tokens, timeout, backend,
                  agent_opt, seed, engine, output)
    cfg, policy = _setup(flags, run_cfg, "eval")
    report = _run(tasks, k, cfg, policy, f"eval {cfg.scaffold}", progress=not no_progress)
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
    tasks_path: str | None = TASKS_ARG,
    n: int = typer.Option(8, "-n", help="Trials per task."),
    band: str = typer.Option("1..N-1", "--band", help="Keep tasks solved LO..HI times out of N (inclusive)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output index (.parquet)."),
    agent: str | None = AGENT, model: str | None = MODEL, base_url: str | None = BASE_URL,
    output: Path | None = typer.Option(None, "--output", help="Also write results.json and trial artifacts here."),
    concurrency: int | None = CONCURRENCY,
    temperature: float | None = typer.Option(None, "--temperature", "-t", help="Sampling temperature. (default: 1.0)"),
    max_turns: int | None = MAX_TURNS, max_tokens: int | None = MAX_TOKENS, timeout: float | None = TIMEOUT,
    backend: str | None = BACKEND, task: list[str] | None = TASK_IDS, limit: int | None = LIMIT,
    agent_opt: list[str] | None = AGENT_OPT, seed: int | None = SEED, engine: str | None = ENGINE,
    config: Path | None = RUN_CONFIG, override: list[str] | None = OVERRIDE,
    split: str = typer.Option("train", "--split", help=(
        "With --config and no TASKS: the run's training tasks (train), held-out tasks (val) or both (all).")),
    no_progress: bool = NO_PROGRESS,
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
    run_cfg = _run_config(config, override)
    tasks = _tasks(tasks_path, run_cfg, split, task, limit)
    if temperature is None and run_cfg is None:
        temperature = 1.0  # infer's own default: the full sampling distribution
    flags = Flags(agent, model, base_url, concurrency, temperature, max_turns, max_tokens, timeout, backend,
                  agent_opt, seed, engine, output)
    cfg, policy = _setup(flags, run_cfg, "infer")
    report = _run(tasks, n, cfg, policy, f"infer {cfg.scaffold}", progress=not no_progress)
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
