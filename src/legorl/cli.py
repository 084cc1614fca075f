"""The `legorl` command line. Sub-commands live beside the layer they drive; heavy imports
(torch, transformers) happen inside commands so `--help` stays instant."""

from __future__ import annotations

import signal
import sys
import warnings

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


def _one_line_warnings() -> None:
    """Config warnings (a moved key) print as `warning: ...`, not with a source line."""
    default = warnings.formatwarning

    def fmt(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
        if category.__name__ == "ConfigKeyMoved":
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = fmt


def _stop_like_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    """Run the app; usage errors become one line (`error: ... (see 'legorl X --help')`), exit 2.

    SIGTERM (`kill`, a scheduler stopping the job) unwinds as Ctrl-C does, so what the command started stops with
    it: a vLLM server runs in its own process group and would otherwise outlive the trainer, holding its memory."""
    _one_line_warnings()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    try:  # typer >= 0.20 vendors click
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click import exceptions as cx  # type: ignore[no-redef]

    try:
        rc = app(standalone_mode=False)
    except cx.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
        sys.exit(2)
    except cx.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "legorl"
        typer.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except cx.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)

if __name__ == "__main__":
    main()
