"""`legorl models`: list and prepare models in the store."""

from __future__ import annotations

import typer

app = typer.Typer(help="List and prepare models in the local store ($LEGORL_HOME/models).", no_args_is_help=True)


@app.command("list")
def list_cmd() -> None:
    """Registered models and whether each is prepared."""
    from rich.console import Console
    from rich.table import Table

    from legorl.models.store import list_models

    table = Table("name", "prepared", "description")
    for name, desc, path in list_models():
        table.add_row(name, str(path) if path else "no", desc)
    Console().print(table)


@app.command("prepare")
def prepare_cmd(
    names: list[str] = typer.Argument(None, help="Model names (default: the default policy model)."),
    force: bool = typer.Option(False, help="Rebuild even if already prepared."),
) -> None:
    """Build registered models into the store (the default model is converted from its GGUF)."""
    from legorl.models.store import DEFAULT_MODEL, ModelNotFoundError, prepare_model

    for name in names or [DEFAULT_MODEL]:
        try:
            path = prepare_model(name, force=force)
        except (ModelNotFoundError, FileNotFoundError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"{name}: {path}")
