"""A second hop: the file that holds the value is not named in the instruction but in a pointer file.

`indirect(rng, found)` moves a one-file source's file into a directory among look-alike siblings (the
same text with other values) and has the instruction name a pointer file instead, so the task takes two
looks: the pointer, then the file it names. `kinds.make_spec` applies it to about half the tasks of each
kind whose source allows it, so "look until you have the value" is a skill of most kinds, not of one
source (the `pointer` source alone left it in 8% of the demonstrations, and the policy never learnt it).
"""

from __future__ import annotations

import random
import re

from legorl.tasks.generate.parts import WORDS, Found, Value, draw_values

HOP_SOURCES = ("json", "ini", "env", "yaml", "log", "csv")  # one file each, named by its path in `where`
HOP_SHARE = 0.5
POINTERS = ["CURRENT.txt", "LOCATION.txt", "ACTIVE.txt", "INDEX.txt"]
DIRS = ["store", "shelf", "conf.d", "sources", "drop"]


def _swap(text: str, old: str, new: str, number: bool) -> str:
    if number:
        return re.sub(rf"(?<!\d){re.escape(old)}(?!\d)", new, text)
    return text.replace(old, new)


def indirect(rng: random.Random, f: Found) -> Found:
    """`f` behind a pointer: its one file moved to `<dir>/<word>.<ext>` beside two siblings holding other values."""
    (rel, text), = f.files.items()
    ext = rel.rsplit(".", 1)[1]
    d = rng.choice([x for x in DIRS if x not in f.dirs and x != rel.split("/")[0]])
    names = [f"{w}.{ext}" for w in rng.sample(WORDS, 3)]
    number = f.value.type == "number"
    others = [v for v in draw_values(rng, f.value.type, 2 + len(f.decoys) + 2)
              if v != f.value.text and v not in f.decoys][:2]
    files = {f"{d}/{names[0]}": text}
    files |= {f"{d}/{n}": _swap(text, f.value.text, v, number) for n, v in zip(names[1:], others, strict=True)}
    ptr = rng.choice(POINTERS)
    files[ptr] = f"The file in use is /app/{d}/{names[0]}\n"
    where = f.where.replace(f"/app/{rel}", f"the file that /app/{ptr} names")
    assert where != f.where, f"{rel} is not named in {f.where!r}"
    look = [f"cat /app/{ptr}", *(c.replace(f"/app/{rel}", f"/app/{d}/{names[0]}") for c in f.look)]
    dirs = (f.dirs - {rel.split("/")[0]}) | {d}
    return Found(Value(f.value.text, f.value.type), where, files, look, [*f.decoys, *others], f.target,
                 list(f.runs), set(f.executable), dirs)
