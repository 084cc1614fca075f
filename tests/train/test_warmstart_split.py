"""The warm start's share of the training tasks per [metadata] value (`warm_start.stratify_by`): one
demonstration of every training kind beside a kind holdout, none of a held-out kind, RL on the rest; or
whole kinds demonstrated (`warm_start.demonstrate_by`), RL on kinds no demonstration showed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from legorl.config import load_config
from legorl.tasks.model import Task
from legorl.tasks.split import load_task_split, share_per_value, whole_values
from legorl.train.warmstart import split_for_warm_start

ROOT = Path(__file__).resolve().parents[2]
LOOKACT = ROOT / "examples" / "agent-lookact.toml"


def _tasks(tmp_path: Path, sizes: dict[str, int], no_demo: set[str] = frozenset()) -> list[Task]:
    out = []
    for kind, n in sizes.items():
        for i in range(n):
            tid = f"{kind}-{i}"
            sol = tmp_path / tid / "solution"
            sol.mkdir(parents=True)
            if tid not in no_demo:
                (sol / "demonstration.json").write_text('{"commands": ["ls"]}')
            out.append(Task(tid, tmp_path / tid, "do it", metadata={"kind": kind}))
    return out


def test_share_per_value_takes_each_kind(tmp_path):
    tasks = _tasks(tmp_path, {"a": 3, "b": 3, "c": 2, "d": 1, "e": 10})
    rest, share = share_per_value(tasks, 0.1, "kind", seed=0)
    # round(n x 0.1) but at least one of each kind with two or more tasks; a lone task stays with the rest
    assert Counter(t.metadata["kind"] for t in share) == {"a": 1, "b": 1, "c": 1, "e": 1}
    assert sorted(t.id for t in rest + share) == sorted(t.id for t in tasks)
    assert [t.id for t in share] == [t.id for t in tasks if t in share]  # input order kept
    _, share2 = share_per_value(list(reversed(tasks)), 0.1, "kind", seed=0)
    assert {t.id for t in share2} == {t.id for t in share}  # order-free
    others = [share_per_value(tasks, 0.1, "kind", seed=s)[1] for s in range(1, 6)]
    assert any({t.id for t in o} != {t.id for t in share} for o in others)  # the seed draws
    assert Counter(t.metadata["kind"] for t in share_per_value(tasks, 0.5, "kind")[1]) == {
        "a": 2, "b": 2, "c": 1, "e": 5}  # Python rounds 1.5 to 2, 0.5 (d's lone task) to 0


def test_share_per_value_picks_among_eligible(tmp_path):
    tasks = _tasks(tmp_path, {"a": 3, "b": 2}, no_demo={"a-0", "a-1", "b-0", "b-1"})
    has_demo = lambda t: (t.solution_dir / "demonstration.json").is_file()  # noqa: E731
    for seed in range(6):
        _, share = share_per_value(tasks, 0.34, "kind", seed=seed, eligible=has_demo)
        assert [t.id for t in share] == ["a-2"]  # b has no demonstration: none of b is taken
    with pytest.raises(ValueError, match="no task has \\[metadata\\] 'kidn'"):
        share_per_value(tasks, 0.3, "kidn")


def test_lookact_warm_start_demonstrates_every_training_kind_once():
    # the file until 2026-12-05: one demonstration per kind (`~key` drops the file's whole-kind split)
    cfg = load_config(LOOKACT, ["~warm_start.demonstrate_by", "warm_start.stratify_by=kind"])
    train, val = load_task_split(cfg.tasks)
    demo, rl = split_for_warm_start(cfg, train)
    kinds = {t.metadata["kind"] for t in train}
    held = {t.metadata["kind"] for t in val}
    assert len(kinds) == 113 and len(held) == 20 and not kinds & held
    assert Counter(t.metadata["kind"] for t in demo) == dict.fromkeys(kinds, 1)  # one of each, none held out
    assert not {t.id for t in demo} & {t.id for t in rl} and len(demo) + len(rl) == len(train)
    assert Counter(t.metadata["kind"] for t in rl) == dict.fromkeys(kinds, 2)  # RL: the other two of each
    assert split_for_warm_start(cfg, train) == (demo, rl)  # the same halves on resume
    reseeded = load_config(LOOKACT, ["~warm_start.demonstrate_by", "warm_start.stratify_by=kind",
                                     "tasks.split_seed=1"])
    train1, _ = load_task_split(reseeded.tasks)
    assert {t.id for t in split_for_warm_start(reseeded, train1)[0]} != {t.id for t in demo}
    # unset: today's split over all training tasks leaves kinds out
    plain = cfg.model_copy(update={"warm_start": cfg.warm_start.model_copy(update={"stratify_by": None,
                                                                                  "task_fraction": 0.15})})
    assert len({t.metadata["kind"] for t in split_for_warm_start(plain, train)[0]}) < len(kinds)


def test_warm_start_stratify_by_refusals():
    with pytest.raises(ValueError, match=r"warm_start.stratify_by='kind' splits .* set task_fraction < 1"):
        load_config(None, ["warm_start.stratify_by=kind"])
    with pytest.raises(ValueError, match=r"warm_start.stratify_by='kind' and tasks.stratify_by='family'"):
        load_config(None, ["warm_start.stratify_by=kind", "warm_start.task_fraction=0.5",
                           "tasks.stratify_by=family"])
    same = load_config(None, ["warm_start.stratify_by=kind", "warm_start.task_fraction=0.5", "tasks.stratify_by=kind"])
    assert same.warm_start.stratify_by == "kind"
    cfg = load_config(None, ["warm_start.stratify_by=kidn", "warm_start.task_fraction=0.5",
                             "tasks.train=builtin:shell-multistep"])
    train, _ = load_task_split(cfg.tasks)
    with pytest.raises(ValueError, match=r"warm_start.stratify_by: no task has \[metadata\] 'kidn'"):
        split_for_warm_start(cfg, train)


def test_whole_values_takes_every_eligible_task_of_a_share_of_kinds(tmp_path):
    tasks = _tasks(tmp_path, {"a": 3, "b": 3, "c": 2, "d": 1, "e": 3}, no_demo={"a-0", "d-0"})
    has_demo = lambda t: (t.solution_dir / "demonstration.json").is_file()  # noqa: E731
    rest, share = whole_values(tasks, 0.4, "kind", seed=0, eligible=has_demo)
    kinds = {t.metadata["kind"] for t in share}
    assert len(kinds) == 2 and "d" not in kinds  # round(5 x 0.4) kinds, among those with a demonstration
    assert all(has_demo(t) for t in share) and not kinds & {t.metadata["kind"] for t in rest if has_demo(t)}
    assert sorted(t.id for t in rest + share) == sorted(t.id for t in tasks)
    assert {t.id for t in whole_values(list(reversed(tasks)), 0.4, "kind", eligible=has_demo)[1]} == {
        t.id for t in share}  # order-free
    draws = [frozenset(t.metadata["kind"] for t in whole_values(tasks, 0.4, "kind", seed=s)[1]) for s in range(8)]
    assert len(set(draws)) > 1  # the seed draws
    with pytest.raises(ValueError, match="takes every value"):
        whole_values(tasks, 1.0, "kind")
    with pytest.raises(ValueError, match="no task has \\[metadata\\] 'kidn'"):
        whole_values(tasks, 0.3, "kidn")


def test_lookact_demonstrate_by_kind_leaves_rl_the_undemonstrated_kinds():
    cfg = load_config(LOOKACT)
    assert cfg.warm_start.demonstrate_by == "kind" and cfg.warm_start.task_fraction == 0.34
    train, val = load_task_split(cfg.tasks)
    demo, rl = split_for_warm_start(cfg, train)
    demo_kinds, rl_kinds = Counter(t.metadata["kind"] for t in demo), Counter(t.metadata["kind"] for t in rl)
    assert len(demo_kinds) == round(113 * 0.34) and set(demo_kinds.values()) == {3}  # every task of 38 kinds
    assert not demo_kinds.keys() & rl_kinds.keys() and len(rl_kinds) == 113 - 38
    assert not (demo_kinds.keys() | rl_kinds.keys()) & {t.metadata["kind"] for t in val}
    assert split_for_warm_start(cfg, train) == (demo, rl)  # the same halves on resume


def test_warm_start_demonstrate_by_refusals():
    with pytest.raises(ValueError, match=r"warm_start.demonstrate_by='kind' demonstrates .* set task_fraction < 1"):
        load_config(None, ["warm_start.demonstrate_by=kind"])
    with pytest.raises(ValueError, match=r"warm_start.demonstrate_by='kind' and warm_start.stratify_by='kind'"):
        load_config(None, ["warm_start.demonstrate_by=kind", "warm_start.stratify_by=kind",
                           "warm_start.task_fraction=0.5"])
