"""Mixed harnesses (`agent.mix`): which harness a trial runs, and the config that names them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from legorl.config import RunConfig
from legorl.tasks.model import Task
from legorl.trial import TrialSpec
from legorl.workers.config import worker_config
from legorl.workers.harness import Harness, choose_harness

TASK = Task(id="t", path=Path("/nonexistent"), instruction="x")


def test_attempts_follow_the_weights_and_the_choice_is_stable():
    mix = [Harness("builtin", weight=0.5), Harness("mini-swe-agent", weight=0.25), Harness("codex", weight=0.25)]
    picks = Counter()
    for g in range(200):
        group = [choose_harness(mix, TrialSpec(TASK, attempt=a, group_id=f"step_1:task{g}")).name for a in range(8)]
        picks.update(group)
        assert len(set(group)) >= 2  # a group compares harnesses
    total = sum(picks.values())
    assert abs(picks["builtin"] / total - 0.5) < 0.03 and abs(picks["codex"] / total - 0.25) < 0.03
    spec = TrialSpec(TASK, attempt=3, group_id="step_7:x")
    assert len({choose_harness(mix, spec).name for _ in range(5)}) == 1  # a re-run step picks the same
    assert choose_harness([Harness("builtin")], spec).name == "builtin"


def test_config_mix_reaches_the_worker_and_labels_must_differ():
    cfg = RunConfig.model_validate({"agent": {"mix": [
        {"name": "builtin", "weight": 3}, {"name": "builtin", "label": "text", "kwargs": {"tools": False}}]}})
    w = worker_config(cfg)
    assert [(h.key, h.weight, h.kwargs) for h in w.harness_mix()] == [("builtin", 3.0, {}),
                                                                       ("text", 1.0, {"tools": False})]
    assert [h.key for h in worker_config(RunConfig()).harness_mix()] == ["builtin"]
    with pytest.raises(ValueError, match="labels must differ"):
        RunConfig.model_validate({"agent": {"mix": [{"name": "builtin"}, {"name": "builtin"}]}})
