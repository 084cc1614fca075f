"""The layout of a run directory, in one place: `legorl train` writes it; status, doctor and the
dashboard read it.

    <output_dir>/<name>/config.json                     the resolved run config
    <output_dir>/<name>/logs/<name>.log, <name>.jsonl   one record per step (legorl.ops.metrics)
    <output_dir>/<name>/checkpoints/step_<n>/, latest   legorl.train.checkpoint
    <output_dir>/<name>/warm_start/model/, done.json    legorl.train.warmstart (the RL steps' base model)
    <output_dir>/<name>/trials/<name>/step_<n>/<trial>/ result.json, proxy_trajectory.json, agent/, verifier.log
    <output_dir>/<name>/vllm/replica<i>/                vLLM server logs and caches
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def slug(text: str, limit: int = 60) -> str:
    """A file-name-safe form of a run, task or trial name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:limit] or "task"


@dataclass(frozen=True)
class RunDir:
    root: Path
    name: str  # the experiment name: log file names and the trials sub-directory

    @classmethod
    def of(cls, output_dir: str | Path, name: str) -> RunDir:
        return cls(Path(output_dir) / name, name)

    @property
    def config_json(self) -> Path:
        return self.root / "config.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def log_path(self) -> Path:
        return self.logs / f"{self.name}.log"

    @property
    def jsonl_path(self) -> Path:
        return self.logs / f"{self.name}.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def warm_start(self) -> Path:
        return self.root / "warm_start"

    @property
    def trials(self) -> Path:
        """This run's trials: `trials/<name>/` (the name slugged as the worker writes it)."""
        return self.root / "trials" / slug(self.name)

    def step_dir(self, step: int) -> Path:
        return self.trials / f"step_{step}"

    def trial_dir(self, step: int, trial_id: str) -> Path:
        return self.step_dir(step) / slug(trial_id, 120)

    @property
    def vllm(self) -> Path:
        return self.root / "vllm"
