"""The `legorl` command line. Sub-commands live beside the layer they drive; heavy imports
(torch, transformers) happen inside commands so `--help` stays instant."""

from __future__ import annotations

import sys

import typer

from legorl.models.cli import app as models_app

app = typer.Typer(
    name="legorl",
    help="Online RL for LLM coding agents: sandboxed tasks -> rollouts -> weight updates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(models_app, name="models")


def _register_optional() -> None:
    """Attach sub-command groups whose layers exist (each layer owns its own `cli.py`)."""
    import importlib

    for module in [
        "legorl.tasks.cli",
        "legorl.proxy.cli",
        "legorl.workers.cli",
        "legorl.agents.cli",
        "legorl.train.cli",
        "legorl.ops.cli",
    ]:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)


_register_optional()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
