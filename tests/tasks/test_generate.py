"""legorl.tasks.generate: kinds from parts, seeded tasks that hide their value, the kind split, the CLI.

The sandbox test proves, for a sample covering every source and every action (one task per source,
the actions spread over them), what `legorl tasks generate --check` proves for a whole set: no-op 0,
every blind command 0 (the action on a decoy, naive guesses, a sibling's oracle), oracle 1, demonstration 1.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from legorl.tasks.generate import all_kinds, generate, make_spec, select_kinds
from legorl.tasks.generate.actions import ACTIONS
from legorl.tasks.generate.kinds import Kind, leaks, plan
from legorl.tasks.generate.sources import SOURCES

from .conftest import BWRAP


def test_kinds_are_sources_times_actions():
    kinds = all_kinds()
    assert len(kinds) >= 100
    assert {k.source for k in kinds.values()} == set(SOURCES)
    assert {k.action for k in kinds.values()} == set(ACTIONS)
    assert [k.name for k in select_kinds(["json-*"])] == sorted(k for k in kinds if k.startswith("json-"))
    assert {k.action for k in select_kinds(["*-delete,*-chmod"])} == {"delete", "chmod"}
    with pytest.raises(ValueError, match="no kind matches"):
        select_kinds(["nope-*"])


def test_every_task_hides_its_value():
    """Every kind, three variants: the instruction never shows the answer, the demonstration fits 4 turns
    (looks + act + submit), the blind commands differ from the oracle, and siblings' answers differ."""
    for kind in all_kinds().values():
        specs = [make_spec(kind, 0, v) for v in (1, 2, 3)]
        for s in specs:
            assert not leaks(s.answer, s.instruction), (s.id, s.answer, s.instruction)
            assert 2 <= len(s.look) + len(s.solve) <= 3, s.id
            assert "\n".join(s.solve) not in s.blind and len(s.blind) >= 2, s.id
            assert s.answer in "\n".join(s.solve), s.id
        assert len({s.answer for s in specs}) >= 2 or kind.source == "count", kind.name


def test_leaks_is_whole_numbers():
    assert leaks("12", "write 12 there") and not leaks("12", "/app/item-120.txt") and leaks("amber-1.txt", "x amber-1.txt")


def test_generate_is_seeded_and_prefix_stable(tmp_path):
    a = generate(tmp_path / "a", 20, seed=3)
    b = generate(tmp_path / "b", 30, seed=3)
    c = generate(tmp_path / "c", 20, seed=4)
    assert [(s.id, s.answer) for s in a] == [(s.id, s.answer) for s in b[:20]]
    assert [s.answer for s in a] != [s.answer for s in c]
    for rel in ("task.toml", "instruction.md", "tests/test.sh", "solution/solve.sh", "environment/Dockerfile"):
        assert (tmp_path / "a" / a[0].id / rel).read_text() == (tmp_path / "b" / a[0].id / rel).read_text()
    manifest = json.loads((tmp_path / "a/GENERATED.json").read_text())
    assert manifest["n"] == 20 and manifest["seed"] == 3
    with pytest.raises(FileExistsError):
        generate(tmp_path / "a", 5)
    assert len(generate(tmp_path / "a", 5, overwrite=True)) == 5


def test_round_robin_covers_kinds():
    kinds = select_kinds()
    planned = plan(2 * len(kinds), 0, kinds)
    assert {k.name for k, v in planned if v == 1} == {k.name for k in kinds}
    assert all(v in (1, 2) for _, v in planned)


def test_generated_tasks_load_with_their_kind(tmp_path):
    from legorl.tasks.loader import load_tasks
    from legorl.train.warmstart import demonstration_commands

    generate(tmp_path / "set", 12, seed=0, kinds=["yaml-*", "count-*"])
    tasks = load_tasks(tmp_path / "set")
    assert len(tasks) == 12
    for t in tasks:
        md = t.metadata
        assert md["kind"] == f"{md['value_source']}-{md['action']}" + ("" if md["kind"].count("-") == 1 else
                                                                       f"-{md['value_type']}")
        assert md["blind_commands"] and demonstration_commands(t)
        assert (t.path / "tests/test.sh").stat().st_mode & 0o111


def test_builtin_look_act_loads():
    from legorl.tasks.builtin_sets import builtin_sets, generated_sets, load_builtin

    assert "look-act" in generated_sets() and "look-act" not in builtin_sets()  # not a packaged dir
    tasks = load_builtin("look-act")
    assert len(tasks) == 3 * len(all_kinds())
    assert all(t.source == "builtin:look-act" for t in tasks)
    assert len({t.metadata["kind"] for t in tasks}) == len(all_kinds())


def test_phrasings_reword_the_same_task():
    """`phrasings` draws each request's wording from its own stream: the same files, values, checks and
    demonstration, another sentence; every action has several wordings; none shows the value."""
    import dataclasses
    import re

    shapes: dict[str, set[str]] = {}
    for kind in all_kinds().values():
        for v in (1, 2, 3, 4):
            plain, worded = make_spec(kind, 0, v), make_spec(kind, 0, v, phrasings=True)
            assert dataclasses.replace(worded, instruction=plain.instruction) == plain, worded.id
            assert not leaks(worded.answer, worded.instruction), (worded.id, worded.instruction)
            # the sentence without its names: what the wording alone contributes
            shapes.setdefault(kind.action, set()).add(re.sub(r"\S*[/`\[]\S*", "_", worded.instruction)[:40])
    assert all(len(s) >= 2 for s in shapes.values()), {a: len(s) for a, s in shapes.items()}
    assert make_spec(all_kinds()["json-write-number"], 0, 1).instruction.startswith("Find ")  # off: the first


def test_builtin_set_with_phrasings(tmp_path, monkeypatch):
    """A `GeneratedSet` with `phrasings` (as `builtin:look-act-phrased`) draws its tasks reworded."""
    from legorl.tasks.builtin_sets import load_builtin
    from legorl.tasks.generate import builtin

    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    assert builtin.GENERATED["look-act-phrased"].phrasings and not builtin.GENERATED["look-act"].phrasings
    small = builtin.GeneratedSet("json writes", per_kind=4, seed=0, kinds=("json-write-*",), phrasings=True)
    monkeypatch.setitem(builtin.GENERATED, "json-phrased", small)
    tasks = load_builtin("json-phrased")
    assert len(tasks) == 8 and json.loads((tasks[0].path.parent / "GENERATED.json").read_text())["phrasings"]
    plain = {(s.id, s.instruction) for s in generate(tmp_path / "plain", 8, 0, ["json-write-*"])}
    assert {(t.id, t.instruction.strip()) for t in tasks} != plain
    assert {t.id for t in tasks} == {i for i, _ in plain}


def _fake_tasks(kinds: dict[str, int]):
    from types import SimpleNamespace

    return [SimpleNamespace(id=f"{k}-{i}", metadata={"kind": k}) for k, n in kinds.items() for i in range(n)]


def test_holdout_split_holds_out_whole_kinds():
    from legorl.tasks.split import holdout_split

    tasks = _fake_tasks({f"kind{j}": 3 for j in range(10)})
    train, val = holdout_split(tasks, "kind", 0.2, seed=0)
    held = {t.metadata["kind"] for t in val}
    assert len(held) == 2 and len(val) == 6 and held.isdisjoint(t.metadata["kind"] for t in train)
    assert holdout_split(tasks, "kind", 0.2, seed=0) == (train, val)  # deterministic
    _, val = holdout_split(tasks, "kind", 0.0, ["kind[12]"])
    assert {t.metadata["kind"] for t in val} == {"kind1", "kind2"}
    with pytest.raises(ValueError, match="match no"):
        holdout_split(tasks, "kind", 0.0, ["zzz"])
    with pytest.raises(ValueError, match="nothing is left"):
        holdout_split(tasks, "kind", 0.0, ["kind*"])


def test_holdout_config(tmp_path):
    from legorl.config.trials import TasksSection
    from legorl.tasks.split import load_task_split

    with pytest.raises(ValueError, match="not both"):
        TasksSection(holdout_by="kind", stratify_by="kind")
    with pytest.raises(ValueError, match=r"needs tasks\.holdout_by"):
        TasksSection(holdout_values=["a"])
    generate(tmp_path / "set", 40, seed=0)
    train, val = load_task_split(TasksSection(train=str(tmp_path / "set"), holdout_by="kind", val_fraction=0.25))
    assert val and train and {t.metadata["kind"] for t in val}.isdisjoint(t.metadata["kind"] for t in train)
    train, val = load_task_split(TasksSection(train=str(tmp_path / "set"), holdout_by="action",
                                              holdout_values=["fixcode"]))
    assert val and {t.metadata["action"] for t in val} == {"fixcode"}


def test_cli_generate_and_list(tmp_path):
    from typer.testing import CliRunner

    from legorl.cli import app

    r = CliRunner().invoke(app, ["tasks", "generate", str(tmp_path / "out"), "--n", "6", "--seed", "1",
                                 "--kinds", "ini-*"])
    assert r.exit_code == 0, r.output
    assert "wrote 6 task(s)" in r.output and len(list((tmp_path / "out").glob("ini-*"))) == 6
    r = CliRunner().invoke(app, ["tasks", "generate", str(tmp_path / "worded"), "--n", "6", "--seed", "1",
                                 "--kinds", "ini-*", "--phrasings"])
    assert r.exit_code == 0, r.output
    worded = {p.parent.name: p.read_text() for p in (tmp_path / "worded").glob("*/instruction.md")}
    plain = {p.parent.name: p.read_text() for p in (tmp_path / "out").glob("*/instruction.md")}
    assert worded.keys() == plain.keys() and worded != plain
    r = CliRunner().invoke(app, ["tasks", "generate", str(tmp_path / "out"), "--n", "2"])
    assert r.exit_code == 2 and "not empty" in r.output
    r = CliRunner().invoke(app, ["tasks", "generate", str(tmp_path / "x"), "--list"])
    assert r.exit_code == 0 and f"{len(all_kinds())} kind(s)" in r.output


def covering_sample(seed: int = 0) -> list[Kind]:
    """One kind per source, the actions spread over them so every action appears (each source's own
    actions, least-used first)."""
    kinds = all_kinds()
    used: dict[str, int] = dict.fromkeys(ACTIONS, 0)
    rng = random.Random(seed)
    out = []
    for source in sorted(SOURCES):
        mine = [k for k in kinds.values() if k.source == source]
        rng.shuffle(mine)
        k = min(mine, key=lambda k: used[k.action])
        used[k.action] += 1
        out.append(k)
    assert all(used.values()), used
    return out


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
def test_sample_needs_looking(tmp_path):
    from legorl.tasks.generate.check import check_one, sibling_oracles
    from legorl.tasks.loader import load_tasks

    sample = covering_sample()
    for k in sample:  # variant 1 is checked; variant 2 is only its sibling (a memorised other answer)
        from legorl.tasks.generate.render import write_task

        for v in (1, 2):
            write_task(make_spec(k, 0, v), tmp_path, "look-act", 0)
    tasks = load_tasks(tmp_path)
    siblings = sibling_oracles(tasks, per_task=1)
    checked = [t for t in tasks if t.id.endswith("-1")]
    assert len(checked) == len(SOURCES)

    async def run():
        sem = asyncio.Semaphore(2)

        async def one(t):
            async with sem:
                return await check_one(t, siblings[t.id])

        return await asyncio.gather(*(one(t) for t in checked))

    results = asyncio.run(run())
    bad = [f"{r.task_id}: {r.error or r.wrong}" for r in results if not r.ok]
    assert not bad, "\n".join(bad)
    assert all(len(r.rewards) >= 6 for r in results)  # no-op, sibling, >= 2 blind, oracle, demonstration


def _two_look_specs(kinds: list[str]):
    """The first variant of each kind whose value sits behind a pointer file."""
    out = []
    for name in kinds:
        kind = all_kinds()[name]
        out.append(next(s for v in range(1, 20) if (s := make_spec(kind, 0, v)).looks == 2))
    return out


def test_many_kinds_take_two_looks():
    """About half the tasks of every one-file source name a pointer file instead of the file holding the value:
    the pointer names it among look-alike siblings that hold other values (decoys the blind commands act on)."""
    from legorl.tasks.generate.indirect import HOP_SOURCES

    for kind in (k for k in all_kinds().values() if k.source in HOP_SOURCES):
        looks = [make_spec(kind, 0, v).looks for v in range(1, 9)]
        assert set(looks) == {1, 2}, (kind.name, looks)
    for s in _two_look_specs(["json-write-number", "log-delete", "csv-fixcode", "env-rename"]):
        ptr = next(p for p in s.files if p.endswith(".txt") and s.files[p].startswith("The file in use is /app/"))
        target = s.files[ptr].split("/app/", 1)[1].strip()
        assert f"/app/{ptr}" in s.instruction and target not in s.instruction, s.id
        assert s.look[0] == f"cat /app/{ptr}" and f"/app/{target}" in s.look[1], s.id
        assert leaks(s.answer, s.files[target]), s.id
        siblings = [p for p in s.files if p != target and p.rsplit("/", 1)[0] == target.rsplit("/", 1)[0]]
        assert len(siblings) == 2 and not any(leaks(s.answer, s.files[p]) for p in siblings), s.id
        assert len(s.blind) >= 3, s.id  # the action on an in-file decoy, on a sibling's value, a naive guess


@pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")
def test_two_look_tasks_need_the_pointer(tmp_path):
    """In the sandbox: oracle 1, demonstration 1 (two looks), and 0 for acting on a sibling file's value."""
    from legorl.tasks.generate.check import check_one
    from legorl.tasks.generate.render import write_task
    from legorl.tasks.loader import load_tasks

    for s in _two_look_specs(["yaml-copy", "ini-fixconf-number"]):
        write_task(s, tmp_path, "look-act", 0)
    tasks = load_tasks(tmp_path)
    results = [asyncio.run(check_one(t, [])) for t in tasks]
    bad = [f"{r.task_id}: {r.error or r.wrong}" for r in results if not r.ok]
    assert not bad, "\n".join(bad)
    assert all(len(r.rewards) >= 6 for r in results)  # no-op, 3+ blind, oracle, demonstration


def test_lookact_example_holds_out_unseen_kinds():
    from pathlib import Path

    from legorl.config import load_config
    from legorl.tasks.split import load_task_split

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples/agent-lookact.toml")
    train, val = load_task_split(cfg.tasks)
    seen, held = {t.metadata["kind"] for t in train}, {t.metadata["kind"] for t in val}
    assert len(held) == 20 and not seen & held and len(val) == 60
    # every source and every action still appears in training: held-out kinds are new combinations
    assert {t.metadata["value_source"] for t in train} == set(SOURCES)
    assert {t.metadata["action"] for t in train} == set(ACTIONS)


def test_unseen_values_flags_a_demonstration_that_guesses():
    """A demonstration may type only values the instruction or an earlier output showed (check_one runs it in
    the sandbox and collects the outputs; test_sample_needs_looking covers every source and action)."""
    from legorl.tasks.generate.check import unseen_values

    ask = "Change main.py to import the module whose name is `job.handler` in /app/settings.json"
    look = ("cat /app/settings.json", '{"job": {"handler": "lotus_43"}}')
    assert unseen_values(ask, [look, ("sed -i 's/^from iris_old import/from lotus_43 import/' /app/main.py", "")]) \
        == ["iris_old"]  # the wrong import is in main.py, which it never read
    assert unseen_values(ask, [look, ("sed -i 's/^from [A-Za-z0-9_]* import/from lotus_43 import/' /app/main.py", "")]) == []
    assert unseen_values("", [("echo 4610 > /app/x.txt", ""), ("cat /app/a", "4610")]) == ["4610"]
    # `wc -l` counts the header too: the rows are a number no output showed
    rows = [("wc -l /app/orders.csv", "14 /app/orders.csv"), ("echo 13 > /app/result.txt", "")]
    assert unseen_values("the data rows of /app/orders.csv", rows) == ["13"]
