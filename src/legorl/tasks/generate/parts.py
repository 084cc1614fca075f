"""What a look-then-act task is made of: the hidden value, where a source hides it, what an action needs.

A source puts a value into the sandbox (`Found`); an action asks the agent to do something with it
(`Act`); `kinds.compose` joins the two into a `Spec` that `render` writes as a Harbor task dir.
Values are drawn per task from a seeded `random.Random`, so a task is a pure function of
(seed, kind, variant).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

ValueType = Literal["number", "file", "ident"]

WORDS = ["amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lumen", "maple", "nectar", "orchid", "pepper", "quartz", "raven", "sable", "thistle",
         "umber", "velvet", "willow", "yarrow", "zephyr", "cobalt", "falcon", "gable", "hazel", "iris",
         "lotus", "mango", "nickel", "onyx", "pebble", "quill", "russet", "saffron", "tundra", "walnut",
         "acorn", "birch", "clover", "dune", "elm", "fern", "grove", "heron", "ivy", "jasper"]
EXTENSIONS = ["txt", "dat", "csv", "log", "cfg"]
PEOPLE = ["ana", "bruno", "chen", "dana", "emeka", "farah", "goran", "hana", "ivo", "jun", "kemal", "lena",
          "mira", "nils", "omar", "pia", "quinn", "rosa", "sven", "tara"]


@dataclass(frozen=True)
class Value:
    """The hidden value. `path`: the existing file it names, when a source points at a file (metadata)."""

    text: str
    type: ValueType
    path: str | None = None


@dataclass
class Found:
    """A source's part: files holding the value, how to describe where it is, how an expert looks."""

    value: Value
    where: str  # a noun phrase for the value, e.g. "the `port` key of [server] in /app/settings.ini"
    files: dict[str, str]
    look: list[str]  # commands that reveal it (the demonstration's first turns)
    decoys: list[str]  # other values of the same type in sight: acting on one must score 0
    target: str | None = None  # a noun phrase for the file `value.path`, when there is one
    runs: list[str] = field(default_factory=list)  # Dockerfile RUN lines (mtimes)
    executable: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)  # directories under /app the source uses (actions avoid them)


@dataclass
class Act:
    """An action's part: the instruction, extra files, verifier checks, the oracle's lines."""

    instruction: str
    files: dict[str, str]
    checks: list[str]
    solve: list[str]
    blind: list[str]  # naive commands that must score 0, the same action on a decoy value among them
    look: list[str] = field(default_factory=list)
    executable: set[str] = field(default_factory=set)
    python: bool = False


@dataclass
class Spec:
    """One task, ready to render."""

    kind: str
    variant: int
    source: str
    action: str
    value_type: ValueType
    difficulty: str
    instruction: str
    files: dict[str, str]
    checks: list[str]
    solve: list[str]
    look: list[str]
    blind: list[str]
    answer: str  # the hidden value (never rendered: tests check the instruction does not show it)
    runs: list[str] = field(default_factory=list)
    executable: set[str] = field(default_factory=set)
    python: bool = False
    looks: int = 1  # commands it takes to see the value: 2 when a pointer file names the file that holds it

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.variant}"


def draw_values(rng: random.Random, vtype: ValueType, n: int) -> list[str]:
    """`n` distinct values of a type: numbers of 3-4 digits, file names `word-NN.ext`, identifiers `word_NN`."""
    out: list[str] = []
    while len(out) < n:
        if vtype == "number":
            v = str(rng.randint(120, 9899))
        elif vtype == "file":
            v = f"{rng.choice(WORDS)}-{rng.randint(10, 99)}.{rng.choice(EXTENSIONS)}"
        else:
            v = f"{rng.choice(WORDS)}_{rng.randint(10, 99)}"
        if v not in out and all(v not in o and o not in v for o in out):
            out.append(v)
    return out


class TaskRandom(random.Random):
    """A task's seeded draws, and (`phrasings` on) a second stream that picks its wordings (`phrase`): apart, so
    a task phrased otherwise is the same task (files, values, checks), and a set without phrasings is the same
    as before they existed."""

    def __init__(self, seed: str, phrasings: bool = False) -> None:
        super().__init__(seed)
        self.wording = random.Random(f"{seed}:wording") if phrasings else None


def phrase(rng: random.Random, *forms: str) -> str:
    """One of a request's phrasings: the first, or one drawn per task, so a kind's tasks do not share one
    sentence and what a policy learns about a source is tied to how the value is described, not to one
    action's wording."""
    wording = getattr(rng, "wording", None)
    return wording.choice(forms) if wording is not None else forms[0]


def content_is(path: str, value: str) -> str:
    """A check line: `path` exists and holds `value` (whitespace ignored)."""
    return (f'[ -f {path} ] && [ "$(tr -d " \\n\\t" < {path})" = "{value}" ] '
            f"|| fail '{path} holds the right value'")


def q(text: str) -> str:
    """Single-quoted for bash."""
    return "'" + text.replace("'", "'\\''") + "'"
