"""Per-trial files: <root>/trials/<exp>/step_<n>/<trial_id>/ with proxy_trajectory.json (the proxy
writes it on close), agent/ (scaffold logs), verifier.log and result.json. Without a root, a temp
dir serves the scaffold and is removed after the trial."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from legorl.rundir import RunDir, slug
from legorl.trial import TrialResult


class TrialDir:
    """The trial's artifact dir; `persistent` False means a temp dir that `cleanup` removes."""

    def __init__(self, root: Path | None, exp: str, step: int, trial_id: str):
        self.persistent = root is not None
        if root is not None:
            self.path = RunDir(root, exp).trial_dir(step, trial_id)
            self.path.mkdir(parents=True, exist_ok=True)
        else:
            self.path = Path(tempfile.mkdtemp(prefix=f"legorl-trial-{slug(trial_id, 30)}-"))
        self.agent = self.path / "agent"
        self.agent.mkdir(exist_ok=True)

    @property
    def out(self) -> Path | None:
        """Where durable files go (None: nowhere)."""
        return self.path if self.persistent else None

    def write_text(self, name: str, text: str) -> None:
        if self.persistent:
            (self.path / name).write_text(text)

    def cleanup(self) -> None:
        if not self.persistent:
            shutil.rmtree(self.path, ignore_errors=True)


def result_record(r: TrialResult) -> dict[str, Any]:
    """One JSON-able line per trial (result.json, eval's results.json)."""
    ro = r.tokens
    return {
        "trial_id": r.spec.trial_id,
        "task_id": r.spec.task.id,
        "attempt": r.spec.attempt,
        "group_id": r.spec.group_id or r.spec.task.id,
        "step": r.spec.step,
        "reward": r.reward,
        "outcome": r.outcome,
        "reason": r.reason,
        "turns": r.turns,
        "tokens": len(ro.token_ids) if ro else 0,
        "policy_tokens": ro.num_policy_tokens if ro else 0,
        "duration_s": round(r.duration_s, 3),
        "timings": {k: round(v, 3) for k, v in r.timings.items()},
        "artifacts_dir": r.artifacts_dir,
        "metadata": r.metadata,
    }


def write_result(path: Path, r: TrialResult) -> None:
    path.write_text(json.dumps(result_record(r), indent=2, default=str))
