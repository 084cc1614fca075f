"""Per-step metrics: one `step:N - key:value - ...` line in `logs/<exp>.log` and a JSONL twin.

On resume the files are truncated to the checkpointed step, so a step that ran after the last
checkpoint (and is re-run) never appears twice. Optional sinks (tensorboard, wandb, mlflow; see
`legorl.ops.sinks`) get a copy of each step; the files above do not change with them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from legorl.ops.sinks import MetricsSink, SinkFanout, sinks_from_env


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.6g}"
    return str(v)


class MetricsLogger:
    def __init__(self, log_dir: str | Path, experiment: str, resume_step: int | None = None,
                 sinks: list[MetricsSink] | None = None):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        # None: the sinks named in $LEGORL_METRICS_SINKS (none when unset)
        self.sinks = SinkFanout(sinks_from_env(self.dir, experiment) if sinks is None else sinks)
        self.log_path = self.dir / f"{experiment}.log"
        self.jsonl_path = self.dir / f"{experiment}.jsonl"
        if resume_step is None:
            for p in (self.log_path, self.jsonl_path):
                p.unlink(missing_ok=True)
        else:
            self._truncate(resume_step)

    def _truncate(self, last_step: int) -> None:
        if not self.jsonl_path.exists():
            return
        kept = [r for r in self.read() if r.get("step", 0) <= last_step]
        self.jsonl_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self.log_path.write_text("".join(self._line(r) + "\n" for r in kept))

    @staticmethod
    def _line(record: dict[str, Any]) -> str:
        step = record.get("step", 0)
        rest = " - ".join(f"{k}:{_fmt(v)}" for k, v in record.items() if k != "step")
        return f"step:{step} - {rest}"

    def log(self, step: int, metrics: dict[str, Any]) -> str:
        record = {"step": step, **metrics}
        line = self._line(record)
        with self.jsonl_path.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")
            f.flush()
        with self.log_path.open("a") as f:
            f.write(line + "\n")
        self.sinks.log(step, metrics)
        return line

    def warn(self, step: int, text: str) -> str:
        """A `warning:step:N - text` line in the .log file (the JSONL holds metrics only); returns it."""
        line = f"warning:step:{step} - {text}"
        with self.log_path.open("a") as f:
            f.write(line + "\n")
        return line

    def close(self) -> None:
        """Flush and close the sinks (the files need nothing)."""
        self.sinks.close()

    def read(self) -> list[dict[str, Any]]:
        if not self.jsonl_path.exists():
            return []
        return [json.loads(line) for line in self.jsonl_path.read_text().splitlines() if line.strip()]
