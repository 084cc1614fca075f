"""`legorl agents`: install and list the external agent CLIs the adapters run."""

from __future__ import annotations

import typer

app = typer.Typer(help="External agent CLIs (mini-swe-agent, Claude Code, OpenCode, Codex, Qwen Code, OpenHands).",
                  no_args_is_help=True)


@app.command("install")
def install_cmd(
    name: str = typer.Argument(..., help="mini-swe-agent | claude-code | opencode | codex | qwen-code | openhands"),
    version: str = typer.Option(None, help="A specific package version (default: the latest)."),
) -> None:
    """Install one agent: npm agents into $LEGORL_HOME/agents/NAME, Python agents into this environment."""
    from legorl.agents.install import AGENTS, install

    if name not in AGENTS:
        typer.echo(f"error: unknown agent {name!r}: choose one of {', '.join(sorted(AGENTS))}", err=True)
        raise typer.Exit(2)
    try:
        where = install(name, version)
    except RuntimeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{name}: installed into {where}")


@app.command("list")
def list_cmd() -> None:
    """Known agents and whether each is installed."""
    from legorl.agents.install import status

    for name, where, package in status():
        typer.echo(f"{name:16} {package:28} {where}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="agents")
