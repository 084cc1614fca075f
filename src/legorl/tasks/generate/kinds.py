"""Kinds: every (source, action, value type) the parts allow, and one task of a kind from a seed.

A kind is named `<source>-<action>`, with `-number` / `-file` appended when the pair takes more than
one value type (`json-write-number`, `json-write-file`). Task `<kind>-<variant>` draws its values from
`random.Random(f"{seed}:{kind}:{variant}")`: the same seed gives the same task, whatever else is generated.
"""

from __future__ import annotations

import fnmatch
import random
import re
from dataclasses import dataclass

from legorl.tasks.generate.actions import ACTIONS
from legorl.tasks.generate.indirect import HOP_SHARE, HOP_SOURCES, indirect
from legorl.tasks.generate.parts import Spec, TaskRandom, ValueType
from legorl.tasks.generate.sources import SOURCES

LEVELS = ["easy", "medium", "hard"]


@dataclass(frozen=True)
class Kind:
    name: str
    source: str
    action: str
    value_type: ValueType


def all_kinds() -> dict[str, Kind]:
    """Every compatible (source, action, type), by name."""
    out: dict[str, Kind] = {}
    for s, sdef in SOURCES.items():
        for a, adef in ACTIONS.items():
            if s in adef.exclude:
                continue
            types = [t for t in adef.types if t in sdef.types]
            for t in types:
                name = f"{s}-{a}" + (f"-{t}" if len(types) > 1 else "")
                out[name] = Kind(name, s, a, t)
    return out


def select_kinds(patterns: list[str] | None = None) -> list[Kind]:
    """Kinds matching any glob (`json-*`, `*-delete`, `count-write`); all when none given. Sorted by name."""
    kinds = all_kinds()
    if not patterns:
        return [kinds[k] for k in sorted(kinds)]
    pats = [p.strip() for raw in patterns for p in raw.split(",") if p.strip()]
    chosen = sorted(k for k in kinds if any(fnmatch.fnmatchcase(k, p) for p in pats))
    if not chosen:
        raise ValueError(f"no kind matches {pats}; kinds look like {sorted(kinds)[:4]} (see `legorl tasks generate --list`)")
    return [kinds[k] for k in chosen]


def leaks(value: str, text: str) -> bool:
    """Whether `text` shows `value` (numbers as whole numbers: 12 is not in /app/x-120)."""
    if value.isdigit():
        return re.search(rf"(?<!\d){value}(?!\d)", text) is not None
    return value in text


def make_spec(kind: Kind, seed: int, variant: int, phrasings: bool = False) -> Spec:
    """Task `variant` of `kind`: the source hides a value (behind a pointer file in about half the tasks of
    a `HOP_SOURCES` kind), the action asks for something done with it (`phrasings`: in one of its wordings)."""
    rng = TaskRandom(f"{seed}:{kind.name}:{variant}", phrasings)
    sdef, adef = SOURCES[kind.source], ACTIONS[kind.action]
    for _ in range(50):  # redraw the rare task whose instruction would show its value
        found = sdef.make(rng, kind.value_type)
        if kind.source in HOP_SOURCES and rng.random() < HOP_SHARE:
            found = indirect(rng, found)
        taken = {p.split("/")[0] for p in found.files} | found.dirs
        act = adef.make(rng, found, taken)
        if not leaks(found.value.text, act.instruction):
            break
    else:
        raise RuntimeError(f"{kind.name}: could not draw a task whose instruction hides its value")
    clash = set(found.files) & set(act.files)
    assert not clash, f"{kind.name}-{variant}: source and action both write {clash}"
    level = LEVELS[max(LEVELS.index(sdef.difficulty), LEVELS.index(adef.difficulty))]
    return Spec(kind.name, variant, kind.source, kind.action, kind.value_type, level, act.instruction,
                {**found.files, **act.files}, act.checks, act.solve, [*found.look, *act.look], act.blind,
                found.value.text, runs=found.runs, executable=found.executable | act.executable,
                python=act.python, looks=len(found.look))


def plan(n: int, seed: int, kinds: list[Kind]) -> list[tuple[Kind, int]]:
    """(kind, variant) for `n` tasks: the kinds in a seeded order, round robin, so any n covers kinds evenly."""
    order = list(kinds)
    random.Random(seed).shuffle(order)
    return [(order[i % len(order)], i // len(order) + 1) for i in range(n)]
