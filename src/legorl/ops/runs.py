"""Reading a run directory (its layout: `legorl.rundir.RunDir`) for status, doctor and the dashboard.

Readers are tolerant: a half-written last JSONL line or a trial without result.json is skipped, since
status, doctor and the dashboard read live runs.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legorl.rundir import RunDir

ALIVE_MIN_S = 300.0  # a run whose files changed this recently counts as alive

KEY_METRICS = ("critic/score/mean", "rollout/pass_rate", "actor/entropy", "actor/ppo_kl", "actor/grad_norm",
               "response_length/mean", "rollout_corr/abs_diff_mean", "timing/step_s")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_RESULT_CACHE: dict[Path, tuple[int, int, Any]] = {}  # result.json -> (mtime_ns, size, record)


def _read_result(path: Path) -> Any:
    """result.json, parsed once per version: the dashboard re-reads every trial on each poll."""
    try:
        st = path.stat()
    except OSError:
        return None
    hit = _RESULT_CACHE.get(path)
    if hit is not None and hit[:2] == (st.st_mtime_ns, st.st_size):
        return hit[2]
    rec = _read_json(path)
    if rec is not None:
        _RESULT_CACHE[path] = (st.st_mtime_ns, st.st_size, rec)
    return rec


@dataclass
class Run:
    root: Path

    @property
    def layout(self) -> RunDir:
        return RunDir(self.root, self.name)

    @property
    def config(self) -> dict[str, Any]:
        data = _read_json(RunDir(self.root, "").config_json)
        return data if isinstance(data, dict) else {}

    @property
    def name(self) -> str:
        name = (self.config.get("run") or {}).get("name")
        if isinstance(name, str) and name:
            return name
        logs = sorted(RunDir(self.root, "").logs.glob("*.jsonl"))
        return logs[0].stem if logs else self.root.name

    @property
    def jsonl_path(self) -> Path:
        return self.layout.jsonl_path

    @property
    def log_path(self) -> Path:
        return self.layout.log_path

    @property
    def trials_dir(self) -> Path:
        d = self.layout.trials
        if not d.is_dir():  # the worker slugs odd names; a run has one experiment dir under trials/
            subdirs = [p for p in (self.root / "trials").glob("*") if p.is_dir()]
            if len(subdirs) == 1:
                return subdirs[0]
        return d

    def metrics(self) -> list[dict[str, Any]]:
        """Step records in file order; a torn last line (a write in progress) is dropped."""
        try:
            text = self.jsonl_path.read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def step_dirs(self) -> list[tuple[int, Path]]:
        """(step, dir) for every trials/<name>/step_<n>, by step."""
        out = []
        if self.trials_dir.is_dir():
            for d in self.trials_dir.iterdir():
                m = re.fullmatch(r"step_(\d+)", d.name)
                if m and d.is_dir():
                    out.append((int(m.group(1)), d))
        return sorted(out)

    def trials(self, step: int | None = None) -> list[dict[str, Any]]:
        """result.json records (with `_dir`, the trial dir), by step then trial id."""
        out = []
        for s, d in self.step_dirs():
            if step is not None and s != step:
                continue
            for t in sorted(d.iterdir()):
                rec = _read_result(t / "result.json")
                if isinstance(rec, dict):
                    out.append({"step": s, **rec, "_dir": str(t)})
        return out

    def last_modified(self) -> float:
        """Newest mtime among the logs, config and the newest step's trial dirs."""
        paths = [self.jsonl_path, self.log_path, self.root / "config.json"]
        steps = self.step_dirs()
        if steps:
            paths.append(steps[-1][1])
            paths.extend(steps[-1][1].iterdir())
        mtimes = [p.stat().st_mtime for p in paths if p.exists()]
        return max(mtimes, default=0.0)

    def total_steps(self) -> int | None:
        v = (self.config.get("trainer") or {}).get("total_steps")
        return v if isinstance(v, int) else None


def find_runs(runs_dir: str | Path) -> list[Run]:
    """Run dirs directly under `runs_dir` (or `runs_dir` itself when it is one), by name."""
    base = Path(runs_dir)
    if _is_run(base):
        return [Run(base)]
    if not base.is_dir():
        return []
    return [Run(d) for d in sorted(base.iterdir()) if d.is_dir() and _is_run(d)]


def _is_run(d: Path) -> bool:
    return (d / "config.json").is_file() or any((d / "logs").glob("*.jsonl"))


def train_pids(run: Run) -> list[int]:
    """Ids of `legorl train` processes on this host (same user) whose run dir is `run.root`.

    Matched through /proc: the process's cwd + the run's output_dir/name (from config.json)."""
    cfg = run.config.get("run") or {}
    out_dir, name = cfg.get("output_dir", "runs"), cfg.get("name", run.root.name)
    target = run.root.resolve()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not any(os.path.basename(a) in (b"legorl", b"legorl.cli") for a in argv[:3]) or b"train" not in argv:
                continue
            if (Path(os.readlink(proc / "cwd")) / out_dir / name).resolve() == target:
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


def is_alive(run: Run, records: list[dict[str, Any]] | None = None, now: float | None = None) -> tuple[bool, float]:
    """(alive, seconds since the last write): a `legorl train` process owns the run dir, or its files
    changed within ~2 step times and the last step is not the final one."""
    records = run.metrics() if records is None else records
    age = (now or time.time()) - run.last_modified()
    steps = [r["timing/step_s"] for r in records[-5:] if isinstance(r.get("timing/step_s"), int | float)]
    window = max(ALIVE_MIN_S, 2 * max(steps, default=0.0))
    done = run.total_steps() is not None and bool(records) and records[-1].get("step") == run.total_steps()
    return (age <= window and not done) or bool(train_pids(run)), age


def eta_seconds(records: list[dict[str, Any]], total_steps: int | None) -> float | None:
    """Remaining steps × the median of the last step times (None when unknown)."""
    if not records or total_steps is None:
        return None
    times = [r["timing/step_s"] for r in records[-10:] if isinstance(r.get("timing/step_s"), int | float)]
    if not times:
        return None
    left = max(0, total_steps - int(records[-1].get("step", 0)))
    return left * statistics.median(times)


def outcome_counts(trials: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(str(t.get("outcome")) for t in trials).most_common())


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def summary(run: Run) -> dict[str, Any]:
    """What `legorl status` prints and the dashboard's overview shows."""
    records = run.metrics()
    alive, age = is_alive(run, records)
    train = [r for r in records if r.get("step", 0) > 0]
    last = train[-1] if train else (records[-1] if records else {})
    total = run.total_steps()
    trials = run.trials()
    return {
        "name": run.name,
        "root": str(run.root),
        "alive": alive,
        "last_write_age_s": age,
        "step": last.get("step"),
        "total_steps": total,
        "eta_s": eta_seconds(records, total) if alive else None,
        # what the run printed after its first step: its whole wall time at that step's pace
        "run_estimate_s": next((r["timing/run_estimate_s"] for r in records
                                if isinstance(r.get("timing/run_estimate_s"), int | float)), None),
        "last_metrics": {k: last[k] for k in KEY_METRICS if k in last},
        "outcomes": outcome_counts(trials),
        "num_trials": len(trials),
    }
