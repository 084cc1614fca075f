"""Where the needed value lives: each source hides one value (and same-typed decoys) in the sandbox.

A source is `f(rng, value_type) -> Found`. Every source puts decoys beside the value (an old code in
the same note, the same key in another section, INFO lines beside the ERROR line), so an agent that
grabs the first plausible value fails: it has to read what the instruction points at.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from legorl.tasks.generate.parts import WORDS, Found, Value, ValueType, draw_values, phrase

KEYS: dict[str, list[str]] = {
    "number": ["port", "max_connections", "timeout_ms", "batch_size", "build_number", "quota"],
    "file": ["output_file", "input_file", "template", "log_file", "archive", "report"],
    "ident": ["plugin", "backend", "handler", "module", "driver", "engine"],
}
SECTIONS = ["server", "worker", "release", "job", "cache", "upload"]
FILLER = {"host": "0.0.0.0", "retries": "3", "mode": "safe", "region": "eu-west", "owner": "ops"}


def _key(rng: random.Random, vtype: ValueType) -> tuple[str, str]:
    """(config key, its words for prose)."""
    key = rng.choice(KEYS[vtype])
    return key, key.replace("_", " ")


def _values(rng: random.Random, vtype: ValueType, n_decoys: int) -> tuple[Value, list[str]]:
    v, *decoys = draw_values(rng, vtype, 1 + n_decoys)
    return Value(v, vtype), decoys


def _filler(rng: random.Random, n: int) -> list[tuple[str, str]]:
    return [(k, FILLER[k]) for k in rng.sample(sorted(FILLER), n)]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def named_file(rng: random.Random, vtype: ValueType) -> Found:
    """A note named in the instruction; it also mentions the retired value."""
    value, decoys = _values(rng, vtype, 2)
    _, label = _key(rng, vtype)
    name = rng.choice(["NOTE.txt", "info.txt", "message.txt", "memo.txt"])
    text = (f"Hi! For the next step, the {label} to use is {value.text}.\n"
            f"The previous {label}, {decoys[0]}, is no longer valid.\n")
    where = phrase(rng, f"the {label} to use, as written in /app/{name}",
                        f"the {label} that /app/{name} says to use",
                        f"the {label} /app/{name} gives as the one to use now")
    return Found(value, where, {name: text}, [f"cat /app/{name}"], decoys)


def pointer_file(rng: random.Random, vtype: ValueType) -> Found:
    """A file named in the instruction names the file (among siblings) that holds the value."""
    value, decoys = _values(rng, vtype, 2)
    _, label = _key(rng, vtype)
    ptr = rng.choice(["WHERE.txt", "pointer.txt", "README.txt"])
    d = rng.choice(["notes", "records", "vault", "box"])
    names = [f"{w}.txt" for w in rng.sample(WORDS, 3)]
    files = {f"{d}/{n}": f"{label}: {v}\n" for n, v in zip(names, [value.text, *decoys], strict=True)}
    files[ptr] = f"The {label} is kept in /app/{d}/{names[0]}.\n"
    where = phrase(rng, f"the {label} kept in the file that /app/{ptr} names",
                        f"the {label} stored in the file /app/{ptr} points to")
    return Found(value, where, files,
                 [f"cat /app/{ptr}", f"cat /app/{d}/{names[0]}"], decoys, dirs={d})


def _sections(rng: random.Random) -> tuple[str, str, str]:
    sec, other = rng.sample(SECTIONS, 2)
    return sec, other, rng.choice(["config", "settings", "app", "deploy"])


def _scalar(value: str, vtype: ValueType) -> int | str:
    return int(value) if vtype == "number" else value


def json_key(rng: random.Random, vtype: ValueType) -> Found:
    """A nested JSON key; the same key under another object holds a decoy."""
    value, decoys = _values(rng, vtype, 1)
    key, _ = _key(rng, vtype)
    sec, other, name = _sections(rng)
    blocks = {other: dict([*_filler(rng, 2), (key, _scalar(decoys[0], vtype))]),
              sec: dict([(key, _scalar(value.text, vtype)), *_filler(rng, 2)])}
    if rng.random() < 0.5:
        blocks = dict(reversed(list(blocks.items())))
    where = phrase(rng, f"`{sec}.{key}` in /app/{name}.json",
                        f"the `{key}` of the `{sec}` object in /app/{name}.json",
                        f"the value of `{key}` under `{sec}` in /app/{name}.json")
    return Found(value, where, {f"{name}.json": json.dumps(blocks, indent=2) + "\n"},
                 [f"cat /app/{name}.json"], decoys)


def ini_key(rng: random.Random, vtype: ValueType) -> Found:
    """An INI setting; the same key in another section holds a decoy."""
    value, decoys = _values(rng, vtype, 1)
    key, _ = _key(rng, vtype)
    sec, other, name = _sections(rng)
    parts = [(other, decoys[0]), (sec, value.text)]
    rng.shuffle(parts)
    text = "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in [*_filler(rng, 1), (key, v)]) + "\n"
                   for s, v in parts)
    where = phrase(rng, f"the `{key}` setting of the [{sec}] section in /app/{name}.ini",
                        f"`{key}` under [{sec}] in /app/{name}.ini")
    return Found(value, where, {f"{name}.ini": text},
                 [f"cat /app/{name}.ini"], decoys)


def env_key(rng: random.Random, vtype: ValueType) -> Found:
    """A KEY=value file; `KEY_OLD` beside it holds a decoy."""
    value, decoys = _values(rng, vtype, 1)
    key = _key(rng, vtype)[0].upper()
    name = rng.choice(["service", "deploy", "app", "runtime"])
    lines = [f"{key}_OLD={decoys[0]}", f"{key}={value.text}"]
    rng.shuffle(lines)
    lines = ["# environment for the service", f"LOG_LEVEL={rng.choice(['info', 'debug'])}", *lines]
    where = phrase(rng, f"`{key}` in /app/{name}.env (not `{key}_OLD`)",
                        f"the value of `{key}` (not of `{key}_OLD`) in /app/{name}.env")
    return Found(value, where, {f"{name}.env": "\n".join(lines) + "\n"},
                 [f"cat /app/{name}.env"], decoys)


def yaml_key(rng: random.Random, vtype: ValueType) -> Found:
    """A nested YAML key; the same key under another parent holds a decoy."""
    value, decoys = _values(rng, vtype, 1)
    key, _ = _key(rng, vtype)
    sec, other, name = _sections(rng)
    parts = [(other, decoys[0]), (sec, value.text)]
    rng.shuffle(parts)
    text = "".join(f"{s}:\n" + "".join(f"  {k}: {v}\n" for k, v in [*_filler(rng, 1), (key, v)]) for s, v in parts)
    where = phrase(rng, f"`{sec}.{key}` in /app/{name}.yaml",
                        f"the `{key}` under `{sec}:` in /app/{name}.yaml")
    return Found(value, where, {f"{name}.yaml": text}, [f"cat /app/{name}.yaml"], decoys)


def log_line(rng: random.Random, vtype: ValueType) -> Found:
    """One ERROR line among INFO/WARN lines, each carrying a `key=` value."""
    value, decoys = _values(rng, vtype, 3)
    key, _ = _key(rng, vtype)
    svc = rng.choice(["api", "worker", "backup", "sync", "ingest"])
    n = rng.randint(6, 10)
    err = rng.randrange(1, n - 1)
    lines = []
    for i in range(n):
        level, v = ("ERROR", value.text) if i == err else (rng.choice(["INFO", "INFO", "WARN"]), rng.choice(decoys))
        lines.append(f"2025-06-1{rng.randint(0, 9)} 10:{10 + i}:{rng.randint(10, 59)} {level} {svc}: "
                     f"{'request failed' if level == 'ERROR' else 'request done'} {key}={v}")
    where = phrase(rng, f"the `{key}` on the ERROR line of /app/logs/{svc}.log",
                        f"the `{key}=` value of the line logged at ERROR level in /app/logs/{svc}.log")
    return Found(value, where,
                 {f"logs/{svc}.log": "\n".join(lines) + "\n"}, [f"grep ERROR /app/logs/{svc}.log"], decoys,
                 dirs={"logs"})


def command_output(rng: random.Random, vtype: ValueType) -> Found:
    """A script prints the value (kept encoded in the script, so running it is the way to see it)."""
    value, decoys = _values(rng, vtype, 1)
    _, label = _key(rng, vtype)
    tool = rng.choice(["info", "status", "show-config", "whatis"])
    script = ("#!/bin/bash\n# Prints this host's settings.\n"
              f"echo \"host: node-{rng.randint(2, 9)}\"\n"
              f"echo \"old {label}: $(echo {_b64(decoys[0])} | base64 -d)\"\n"
              f"echo \"current {label}: $(echo {_b64(value.text)} | base64 -d)\"\n")
    where = phrase(rng, f"the current {label} that `bash /app/{tool}.sh` prints",
                        f"the current {label}, as `bash /app/{tool}.sh` reports it")
    return Found(value, where, {f"{tool}.sh": script},
                 [f"bash /app/{tool}.sh"], decoys, executable={f"{tool}.sh"})


def error_message(rng: random.Random, vtype: ValueType) -> Found:
    """A script fails; its error message names the required value (and the wrong one it has)."""
    value, decoys = _values(rng, vtype, 1)
    _, label = _key(rng, vtype)
    run = rng.choice(["start", "deploy", "launch", "run-job"])
    script = ("#!/bin/bash\n# Starts the job; checks its settings first.\n"
              f"want=$(echo {_b64(value.text)} | base64 -d)\n"
              f"echo \"{run}: error: the {label} is set to {decoys[0]}, but this job requires $want\" >&2\n"
              "exit 1\n")
    where = phrase(rng, f"the {label} that the error of `bash /app/{run}.sh` says the job requires",
                        f"the {label} the job requires, according to the error `bash /app/{run}.sh` prints")
    return Found(value, where,
                 {f"{run}.sh": script}, [f"bash /app/{run}.sh"], decoys, executable={f"{run}.sh"})


def csv_row(rng: random.Random, vtype: ValueType) -> Found:
    """A column of one named row in a CSV table."""
    value, decoys = _values(rng, vtype, 4)
    key, _ = _key(rng, vtype)
    table = rng.choice(["services", "jobs", "targets", "hosts"])
    rows = rng.sample([w for w in WORDS if not any(w != o and w in o for o in WORDS)], 5)
    at = rng.randrange(1, 4)
    vals = [*decoys[:at], value.text, *decoys[at:]]
    text = f"name,{key}\n" + "".join(f"{r},{v}\n" for r, v in zip(rows, vals, strict=True))
    where = phrase(rng, f"the `{key}` of the row named `{rows[at]}` in /app/{table}.csv",
                        f"the `{key}` column of the `{rows[at]}` row in /app/{table}.csv")
    return Found(value, where, {f"{table}.csv": text},
                 [f"grep '^{rows[at]},' /app/{table}.csv"], decoys)


def _dir_files(rng: random.Random, pools: list[str]) -> tuple[str, list[str], int]:
    """(dir, 5 file names, index of the answer): never the first or last by name, so `ls | head -1` misses."""
    d = rng.choice(pools)
    names = draw_values(rng, "file", 5)
    ordered = sorted(names)
    answer = names.index(rng.choice(ordered[1:-1]))
    return d, names, answer


def _meta(d: str, names: list[str], answer: int, what: str, look: str, files: dict[str, str],
          **extra) -> Found:
    name = names[answer]
    value = Value(name, "file", f"/app/{d}/{name}")
    return Found(value, f"the name of the {what} in /app/{d}/", files, [look],
                 [n for n in names if n != name], target=f"the {what} in /app/{d}/", dirs={d}, **extra)


def largest_file(rng: random.Random, vtype: ValueType) -> Found:
    d, names, answer = _dir_files(rng, ["data", "files", "uploads", "archive"])
    sizes = rng.sample(range(2, 40), 5)
    sizes[answer] = max(sizes) + rng.randint(5, 30)
    files = {f"{d}/{n}": "".join(f"row {j}\n" for j in range(s)) for n, s in zip(names, sizes, strict=True)}
    what = phrase(rng, "largest file", "biggest file")
    return _meta(d, names, answer, what, f"ls -lS /app/{d}", files)


def newest_file(rng: random.Random, vtype: ValueType) -> Found:
    d, names, answer = _dir_files(rng, ["inbox", "drafts", "incoming", "spool"])
    order = [j for j in range(5) if j != answer]
    rng.shuffle(order)
    runs = [f"touch -d '2025-0{m + 2}-1{rng.randint(0, 9)} 09:00' {d}/{names[j]}"
            for m, j in enumerate([*order, answer])]
    files = {f"{d}/{n}": f"entry {rng.randint(100, 999)}\n" for n in names}
    what = phrase(rng, "most recently modified file", "newest file by modification time")
    return _meta(d, names, answer, what, f"ls -lt /app/{d}", files, runs=[" && ".join(runs)])


def executable_file(rng: random.Random, vtype: ValueType) -> Found:
    d, names, answer = _dir_files(rng, ["bin", "tools", "hooks", "jobs"])
    files = {f"{d}/{n}": f"#!/bin/bash\necho {n}\n" for n in names}
    what = phrase(rng, "only executable file", "one file with its executable bit set")
    return _meta(d, names, answer, what, f"ls -l /app/{d}", files, executable={f"{d}/{names[answer]}"})


def count(rng: random.Random, vtype: ValueType) -> Found:
    """A number that is a count: WARN lines in a log, files in a directory, rows of a CSV."""
    k = rng.randint(4, 23)
    how = rng.choice(["warn", "files", "rows"])
    if how == "warn":
        other = rng.randint(3, 9)
        lines = ["WARN disk slow"] * k + [rng.choice(["INFO ok", "ERROR retry"]) for _ in range(other)]
        rng.shuffle(lines)
        svc = rng.choice(["api", "worker", "sync"])
        where = phrase(rng, f"the number of lines containing `WARN` in /app/logs/{svc}.log",
                            f"the count of `WARN` lines in /app/logs/{svc}.log")
        return Found(Value(str(k), "number"), where,
                     {f"logs/{svc}.log": "\n".join(lines) + "\n"}, [f"grep -c WARN /app/logs/{svc}.log"],
                     [str(k + other), str(k + 1)], dirs={"logs"})
    if how == "files":
        d = rng.choice(["queue", "pending", "batch"])
        files = {f"{d}/item-{j:03d}.txt": f"item {j}\n" for j in rng.sample(range(1000), k)}
        where = phrase(rng, f"the number of files in /app/{d}/", f"the count of files in /app/{d}/")
        return Found(Value(str(k), "number"), where, files,
                     [f"ls /app/{d} | wc -l"], [str(k - 1), str(k + 1)], dirs={d})
    table = rng.choice(["orders", "events", "visits"])
    text = "id,amount\n" + "".join(f"{1000 + j},{rng.randint(5, 400)}\n" for j in range(k))
    where = phrase(rng, f"the number of data rows in /app/{table}.csv (not counting the header)",
                        f"the count of rows in /app/{table}.csv, header excluded")
    return Found(Value(str(k), "number"), where,
                 {f"{table}.csv": text}, [f"tail -n +2 /app/{table}.csv | wc -l"], [str(k + 1), str(k - 1)])


@dataclass(frozen=True)
class SourceDef:
    make: Callable[[random.Random, ValueType], Found]
    types: tuple[ValueType, ...]
    difficulty: str


ALL_TYPES: tuple[ValueType, ...] = ("number", "file", "ident")
SOURCES: dict[str, SourceDef] = {
    "note": SourceDef(named_file, ALL_TYPES, "easy"),
    "pointer": SourceDef(pointer_file, ALL_TYPES, "medium"),
    "json": SourceDef(json_key, ALL_TYPES, "medium"),
    "ini": SourceDef(ini_key, ALL_TYPES, "medium"),
    "env": SourceDef(env_key, ALL_TYPES, "easy"),
    "yaml": SourceDef(yaml_key, ALL_TYPES, "medium"),
    "log": SourceDef(log_line, ALL_TYPES, "medium"),
    "cmd": SourceDef(command_output, ALL_TYPES, "easy"),
    "error": SourceDef(error_message, ALL_TYPES, "medium"),
    "csv": SourceDef(csv_row, ALL_TYPES, "medium"),
    "largest": SourceDef(largest_file, ("file",), "medium"),
    "newest": SourceDef(newest_file, ("file",), "medium"),
    "exec": SourceDef(executable_file, ("file",), "medium"),
    "count": SourceDef(count, ("number",), "medium"),
}
