"""`legorl preflight | doctor | status | dashboard`: operating a run from its config and its run dir.

Imports stay light (no torch) so `legorl --help` is instant; each command imports what it needs.
"""

from __future__ import annotations

from pathlib import Path

import typer


def _status_lines(run_dir: Path) -> list[str]:
    from legorl.ops.runs import find_runs, fmt_duration, summary

    runs = find_runs(run_dir)
    if not runs:
        raise typer.BadParameter(f"{run_dir}: not a run dir (no config.json or logs/*.jsonl)")
    lines = []
    for run in runs:
        s = summary(run)
        state = "alive" if s["alive"] else "not running"
        lines.append(f"run {s['name']} ({s['root']}): {state}, last write {fmt_duration(s['last_write_age_s'])} ago")
        total = s["total_steps"] or "?"
        eta = f", ETA {fmt_duration(s['eta_s'])}" if s["eta_s"] is not None else ""
        if s.get("run_estimate_s") is not None:
            eta += f" (estimated after the first step: {fmt_duration(s['run_estimate_s'])} in all)"
        lines.append(f"  step {s['step'] if s['step'] is not None else '-'}/{total}{eta}")
        for k, v in s["last_metrics"].items():
            lines.append(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
        if s["num_trials"]:
            counts = ", ".join(f"{k} {v}" for k, v in s["outcomes"].items())
            lines.append(f"  trials so far: {s['num_trials']} ({counts})")
    return lines


def register(app: typer.Typer) -> None:
    @app.command("preflight")
    def preflight_cmd(
        config: Path = typer.Argument(..., help="Run config (TOML)."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. agent.tool_parser=hermes; ~key drops a key the file sets"),
        structure_only: bool = typer.Option(
            False, "--structure-only", help="Skip checks that need files or services on this host."),
    ) -> None:
        """Check a run config before training: one line per check; exit 1 on any FATAL."""
        from legorl.ops.checks import print_results
        from legorl.ops.preflight import preflight_file

        if not print_results(preflight_file(config, overrides or [], structure_only=structure_only), typer.echo):
            raise typer.Exit(1)

    @app.command("doctor")
    def doctor_cmd(run_dir: Path = typer.Argument(..., help="A run dir (runs/<name>).")) -> None:
        """Name known failure signatures in a run's logs and trials, with their fix; exit 1 if any."""
        from legorl.ops.doctor import diagnose
        from legorl.ops.runs import find_runs

        runs = find_runs(run_dir)
        if not runs:
            raise typer.BadParameter(f"{run_dir}: not a run dir (no config.json or logs/*.jsonl)")
        found = 0
        for run in runs:
            findings = diagnose(run)
            found += len(findings)
            if len(runs) > 1 or not findings:
                typer.echo(f"{run.name}: {len(findings) or 'no known failure signature'}"
                           f"{' finding(s)' if findings else ''}")
            for f in findings:
                for line in f.lines():
                    typer.echo(line)
        if found:
            raise typer.Exit(1)

    @app.command("status")
    def status_cmd(run_dir: Path = typer.Argument(..., help="A run dir (runs/<name>) or a dir of runs.")) -> None:
        """Alive?, last step, key metrics, ETA and trial outcomes so far."""
        for line in _status_lines(run_dir):
            typer.echo(line)

    @app.command("dashboard")
    def dashboard_cmd(
        runs_dir: Path = typer.Argument(Path("runs"), help="Dir holding run dirs (or one run dir)."),
        port: int = typer.Option(8265, "--port", help="Port (0: any free port)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (keep it local)."),
    ) -> None:
        """Serve a live web dashboard over the runs in RUNS_DIR (curves, outcomes, tasks, trajectories)."""
        from legorl.ops.dashboard.server import serve

        serve(runs_dir, host=host, port=port, echo=typer.echo)
