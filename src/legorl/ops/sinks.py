"""Optional metrics sinks (tensorboard, wandb, mlflow) behind one `MetricsSink` interface.

The step log and JSONL stay the source of truth; a sink gets a copy of each step's numeric metrics.
A library is imported only when its sink is asked for, and a sink that fails to log is dropped
with one warning instead of stopping training.

    sinks = make_sinks(["tensorboard"], log_dir, "demo", config=cfg.model_dump())
    MetricsLogger(log_dir, "demo", sinks=sinks)       # or LEGORL_METRICS_SINKS=tensorboard,wandb
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)

ENV_VAR = "LEGORL_METRICS_SINKS"
SINK_NAMES = ("tensorboard", "wandb", "mlflow")


@runtime_checkable
class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The scalar metrics a tracker can plot: finite ints/floats (bools and strings left out)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class TensorBoardSink:
    """Event files under `<log_dir>/tensorboard/`: scalars per step and the run's config as text (torch's
    writer; tensorboard's own `tensorboard.summary.Writer` writes scalars only)."""

    def __init__(self, log_dir: str | Path, experiment: str, config: dict[str, Any] | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.dir = Path(log_dir) / "tensorboard"
        self.writer = SummaryWriter(str(self.dir))
        if config:
            self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in flatten(config).items()), 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """One wandb run named after the experiment; project from $WANDB_PROJECT (default 'legorl')."""

    def __init__(self, log_dir: str | Path, experiment: str, config: dict[str, Any] | None = None):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "legorl"), name=experiment,
                              config=config or {}, dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """One mlflow run (tracking URI from $MLFLOW_TRACKING_URI, else mlflow's default: `sqlite:///mlflow.db` in the
    working directory since mlflow 3, whose file store refuses new runs). Checked with wandb 0.31 offline and
    mlflow 3.18 (2026-12-07, `legorl train ... 'run.metrics_sinks=["wandb","mlflow"]'`); neither is a dependency."""

    def __init__(self, log_dir: str | Path, experiment: str, config: dict[str, Any] | None = None):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "legorl"))
        self.run = mlflow.start_run(run_name=experiment)
        if config:
            mlflow.log_params({k: str(v)[:500] for k, v in flatten(config).items()})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


_FACTORIES = {"tensorboard": TensorBoardSink, "wandb": WandbSink, "mlflow": MlflowSink}


def make_sinks(names: Iterable[str], log_dir: str | Path, experiment: str,
               config: dict[str, Any] | None = None) -> list[MetricsSink]:
    """Sinks by name; an unknown name is a ValueError, a missing library an ImportError naming the pip package."""
    sinks: list[MetricsSink] = []
    for name in (n.strip().lower() for n in names):
        if not name:
            continue
        if name not in _FACTORIES:
            raise ValueError(f"unknown metrics sink {name!r}: choose from {', '.join(SINK_NAMES)}")
        try:
            sinks.append(_FACTORIES[name](log_dir, experiment, config))
        except ModuleNotFoundError as exc:
            raise ImportError(f"metrics sink {name!r} needs `pip install {name}` ({exc})") from None
    return sinks


def sinks_from_env(log_dir: str | Path, experiment: str, config: dict[str, Any] | None = None) -> list[MetricsSink]:
    """Sinks named in $LEGORL_METRICS_SINKS (comma-separated); none when unset."""
    return make_sinks(os.environ.get(ENV_VAR, "").split(","), log_dir, experiment, config)


class SinkFanout:
    """Sends a step to every sink; a sink that raises is dropped with one warning."""

    def __init__(self, sinks: Iterable[MetricsSink]):
        self.sinks = list(sinks)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        values = numeric(metrics)
        for sink in list(self.sinks):
            try:
                sink.log(step, values)
            except Exception as exc:
                log.warning("metrics sink %s failed (%s); dropping it", type(sink).__name__, exc)
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                log.warning("metrics sink %s failed to close: %s", type(sink).__name__, exc)
        self.sinks = []
