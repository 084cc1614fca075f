"""`legorl train CONFIG [key=value ...]` and `legorl export`."""

from __future__ import annotations

from pathlib import Path

import typer


def _fail(lines: list[str]) -> None:
    for line in lines:
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_cmd(
        config: Path = typer.Argument(..., help="Run config (TOML); see examples/demo.toml."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. trainer.lr=1e-5; ~key drops a key the file sets"),
        resume: bool = typer.Option(False, "--resume", help="Continue from the run's newest checkpoint."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Discard the run's old checkpoints."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs only)."),
        skip_preflight: bool = typer.Option(False, "--skip-preflight",
                                            help="Do not run the preflight checks first (they refuse FATAL configs)."),
        nproc: int = typer.Option(None, "--nproc", min=1,
                                  help="Trainer ranks (same as trainer.n_ranks=N): FSDP2 over N processes."),
    ) -> None:
        """Train a policy with online RL: trials -> rewards -> update -> weight sync (sync or fully-async)."""
        import asyncio

        from legorl.config import ConfigError, load_config
        from legorl.train.heap import tune_heap

        tune_heap()  # before any thread allocates: two malloc arenas (train/heap.py)

        try:
            cfg = load_config(config, [*(overrides or []), *([f"trainer.n_ranks={nproc}"] if nproc else [])])
        except ConfigError as exc:
            _fail([p if p.startswith(str(config)) else f"{config}: {p}" for p in exc.problems])
        if not skip_preflight:
            from legorl.ops.preflight import print_results, run_preflight

            if not print_results(run_preflight(cfg, prepare_model=True), typer.echo):
                typer.echo("error: preflight found FATAL problems; fix them (or see `legorl preflight`)", err=True)
                raise typer.Exit(2)
        from legorl.models import ModelNotFoundError
        from legorl.serving.types import EngineError
        from legorl.tasks import TaskValidationError
        from legorl.train.device import DeviceUnavailableError
        from legorl.train.loop import train
        from legorl.train.ranks import RankFailedError
        from legorl.train.steps import RunDirExistsError
        from legorl.train.trainer import LogprobMismatchError

        try:
            asyncio.run(train(cfg, resume=resume, overwrite=overwrite, progress=not no_progress))
        except (RunDirExistsError, ModelNotFoundError, TaskValidationError, NotImplementedError, ValueError,
                DeviceUnavailableError) as exc:
            _fail([str(exc).splitlines()[0] if str(exc) else type(exc).__name__])
        except LogprobMismatchError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(3) from None
        except (EngineError, RankFailedError) as exc:  # e.g. a vLLM server that would not start: one line
            typer.echo(f"error: {str(exc).splitlines()[0]}", err=True)
            raise typer.Exit(1) from None

    @app.command("config")
    def config_cmd(
        config: Path = typer.Argument(None, help="Run config (TOML); omitted: the defaults."),
        overrides: list[str] = typer.Argument(None, help="key=value overrides"),
    ) -> None:
        """Print the resolved run config (site file < CONFIG < overrides) as TOML: every key and its value."""
        import tomli_w

        from legorl.config import ConfigError, load_config

        try:
            cfg = load_config(config, overrides or [])
        except ConfigError as exc:
            _fail(exc.problems)
        data = cfg.model_dump(mode="json", exclude_none=True)
        typer.echo(tomli_w.dumps(data, multiline_strings=True))

    @app.command("export")
    def export_cmd(
        checkpoint: Path = typer.Argument(..., help="A checkpoint dir (runs/<name>/checkpoints/step_N) or a run "
                                                    "dir (runs/<name>: its newest checkpoint)."),
        out: Path = typer.Argument(..., help="Where to write the HF model (or PEFT adapter) directory."),
        model: str | None = typer.Option(None, help="The model the checkpoint was trained from (config, "
                                                    "tokenizer; a LoRA adapter's base). Default: read from the "
                                                    "run: its warm-started model, else its model.path."),
        merge: bool = typer.Option(False, "--merge", help="LoRA: write the base with the adapter merged in (a "
                                                          "plain HF model) instead of a PEFT adapter dir."),
    ) -> None:
        """Export a checkpoint as a plain Hugging Face model directory (LoRA: a PEFT adapter dir, or --merge)."""
        from legorl.models import resolve_model
        from legorl.train.checkpoint import export_hf, latest_checkpoint, trained_from
        from legorl.train.lora_export import export_merged, export_peft_adapter, is_lora_checkpoint

        if not checkpoint.is_dir():
            _fail([f"{checkpoint}: no such directory (a run dir or runs/<name>/checkpoints/step_N)"])
        if (checkpoint / "checkpoints").is_dir():
            found = latest_checkpoint(checkpoint / "checkpoints")
            if found is None:
                _fail([f"{checkpoint}: the run has no complete checkpoint yet"])
            checkpoint = found
        base = model or trained_from(checkpoint)
        if base is None:
            _fail([f"{checkpoint}: not inside a run directory, so its base model is unknown -> pass --model"])
        if model is None:
            typer.echo(f"base model: {base} (from the run; --model overrides)", err=True)
        if is_lora_checkpoint(checkpoint):
            export = export_merged if merge else export_peft_adapter
            typer.echo(str(export(checkpoint, resolve_model(base), out)))
            return
        if merge:
            _fail([f"{checkpoint}: --merge is for LoRA checkpoints; this one holds full weights already"])
        if not any((checkpoint / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
            _fail([f"{checkpoint}: not a legorl checkpoint (no model.safetensors, shard index or adapter)"])
        typer.echo(str(export_hf(checkpoint, resolve_model(base), out)))
