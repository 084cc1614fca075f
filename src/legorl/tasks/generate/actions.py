"""What to do with the value: each action turns a source's `Found` into an instruction, checks and an oracle.

An action is `f(rng, found, taken) -> Act`; `taken` holds the names the source already uses under /app,
so the two parts never collide. Every action's checks also fail when the agent acts on a decoy or on
every candidate at once (`rm dir/*`, `chmod +x dir/*`), and its `blind` list says so by example.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from legorl.tasks.generate.parts import WORDS, Act, Found, ValueType, content_is, draw_values, phrase

Make = Callable[[random.Random, Found, set[str]], Act]


def _free(rng: random.Random, pool: list[str], taken: set[str]) -> str:
    name = rng.choice([p for p in pool if p.split("/")[0] not in taken])
    taken.add(name.split("/")[0])
    return name


def _blind(solve: Callable[[str], list[str]], found: Found, *naive: str) -> list[str]:
    """The action on the first and the last decoy (behind a pointer: a sibling file's value), then naive guesses."""
    return [*("\n".join(solve(d)) for d in dict.fromkeys([found.decoys[0], found.decoys[-1]])), *naive]


def lines_are(path: str, lines: list[str]) -> str:
    """A check: `path` holds exactly `lines` (trailing blanks ignored). A heredoc: the renderer keeps it verbatim."""
    body = "\n".join(lines)
    return (f"expected=$(cat <<'LEGORL_EOF'\n{body}\nLEGORL_EOF\n)\n"
            f"[ -f {path} ] && [ \"$(sed 's/[[:space:]]*$//' {path})\" = \"$expected\" ] "
            f"|| fail '{path} holds exactly the expected lines'")


def write(rng: random.Random, f: Found, taken: set[str]) -> Act:
    out = _free(rng, ["answer.txt", "result.txt", "value.txt", "out.txt"], taken)

    def solve(v: str) -> list[str]:
        return [f"echo {v} > /app/{out}"]

    ask = phrase(rng, f"Find {f.where} and write it into /app/{out} (just the value, nothing else).",
                 f"Write {f.where} into /app/{out}, with nothing else in the file.",
                 f"Look up {f.where}; save only that value in /app/{out}.")
    return Act(ask, {},
               [content_is(out, f.value.text)], solve(f.value.text), _blind(solve, f, f"touch /app/{out}"))


def _no_decoys(prefix: str, f: Found) -> list[str]:
    return [f"[ ! -e {prefix}{d} ] || fail 'acted on a wrong candidate'" for d in f.decoys]


def create(rng: random.Random, f: Found, taken: set[str]) -> Act:
    v = f.value.text

    def solve(x: str) -> list[str]:
        return [f"touch /app/{x}"]

    ask = phrase(rng, f"Create an empty file in /app whose name is {f.where}.",
                 f"Make a new, empty file in /app. Its name must be {f.where}.")
    return Act(ask, {},
               [f"[ -f {v} ] || fail 'the file exists'", *_no_decoys("", f)], solve(v),
               _blind(solve, f, "touch /app/file.txt"))


def rename(rng: random.Random, f: Found, taken: set[str]) -> Act:
    src = _free(rng, ["draft.txt", "report.txt", "notes.md", "output.txt"], taken)
    body = f"report {rng.randint(1000, 9999)}"
    v = f.value.text

    def solve(x: str) -> list[str]:
        return [f"mv /app/{src} /app/{x}"]

    checks = [f"[ -f {v} ] && grep -qx '{body}' {v} || fail 'the renamed file holds the original text'",
              f"[ ! -e {src} ] || fail '{src} is gone'", *_no_decoys("", f)]
    ask = phrase(rng, f"Rename /app/{src} so that its new name is {f.where} (keep it in /app).",
                 f"Give /app/{src} a new name, staying in /app: {f.where}.")
    return Act(ask, {src: body + "\n"},
               checks, solve(v), _blind(solve, f, f"mv /app/{src} /app/renamed.txt"))


def copy(rng: random.Random, f: Found, taken: set[str]) -> Act:
    v = f.value.text
    if f.value.path is None:
        src = _free(rng, ["template.txt", "base.txt", "sample.txt", "default.txt"], taken)
        body = f"template {rng.randint(1000, 9999)}"

        def solve(x: str) -> list[str]:
            return [f"cp /app/{src} /app/{x}"]

        checks = [f"[ -f {v} ] && grep -qx '{body}' {v} || fail 'the copy holds the text'",
                  f"grep -qx '{body}' {src} || fail 'the original is kept'", *_no_decoys("", f)]
        ask = phrase(rng, f"Copy /app/{src} to a new file in /app whose name is {f.where}; keep the original.",
                     f"Make a copy of /app/{src} in /app, named {f.where}, and keep the original.")
        return Act(ask,
                   {src: body + "\n"}, checks, solve(v), _blind(solve, f, f"cp /app/{src} /app/copy.txt"))
    d = f.value.path.rsplit("/", 1)[0]
    backup = _free(rng, ["backup", "saved", "keep", "vault2"], taken)

    def solve_meta(x: str) -> list[str]:
        return [f"cp {d}/{x} /app/{backup}/"]

    rel = f.value.path.removeprefix("/app/")
    checks = [f"[ -f {backup}/{v} ] && cmp -s {backup}/{v} {rel} || fail 'the copy is in {backup}/'",
              f"[ -f {rel} ] || fail 'the original is kept'", *_no_decoys(f"{backup}/", f)]
    ask = phrase(rng, f"Copy {f.target} into /app/{backup}/ (keep the original where it is).",
                 f"Put a copy of {f.target} in /app/{backup}/, leaving the original in place.")
    return Act(ask,
               {f"{backup}/README.txt": "copies go here\n"}, checks, solve_meta(v),
               _blind(solve_meta, f, f"cp {d}/* /app/{backup}/"))


def _pool(rng: random.Random, f: Found, taken: set[str], pools: list[str], body: str) -> tuple[str, dict[str, str]]:
    """A directory holding the value's file and the decoys' files (for values that name no existing file)."""
    pool = _free(rng, pools, taken)
    return pool, {f"{pool}/{n}": body for n in [f.value.text, *f.decoys]}


def delete(rng: random.Random, f: Found, taken: set[str]) -> Act:
    if f.value.path is None:
        pool, files = _pool(rng, f, taken, ["trash", "cache", "old", "scratch"], "temporary\n")
        d, what, rest = f"/app/{pool}", f"the file in /app/{pool}/ whose name is {f.where}", "there"
    else:
        files, d = {}, f.value.path.rsplit("/", 1)[0]
        what, rest = f.target, "there"
    rel = d.removeprefix("/app/")

    def solve(x: str) -> list[str]:
        return [f"rm {d}/{x}"]

    checks = [f"[ ! -e {rel}/{f.value.text} ] || fail 'the file is deleted'",
              *(f"[ -f {rel}/{x} ] || fail 'a wrong file was deleted'" for x in f.decoys)]
    ask = phrase(rng, f"Delete {what}; keep the other files {rest}.",
                 f"Remove {what}, and leave the other files alone.")
    return Act(ask, files, checks, solve(f.value.text),
               _blind(solve, f, f"rm -f {d}/*"))


def chmod(rng: random.Random, f: Found, taken: set[str]) -> Act:
    if f.value.path is None:
        pool, files = _pool(rng, f, taken, ["scripts", "tasks", "cron", "steps"], "#!/bin/bash\necho ok\n")
        d, what = f"/app/{pool}", f"the file in /app/{pool}/ whose name is {f.where}"
    else:
        files, d, what = {}, f.value.path.rsplit("/", 1)[0], f.target
    rel = d.removeprefix("/app/")

    def solve(x: str) -> list[str]:
        return [f"chmod +x {d}/{x}"]

    checks = [f"[ -x {rel}/{f.value.text} ] || fail 'the file is executable'",
              *(f"[ -f {rel}/{x} ] && [ ! -x {rel}/{x} ] || fail 'a wrong file was made executable'"
                for x in f.decoys)]
    ask = phrase(rng, f"Make {what} executable; leave the other files as they are.",
                 f"Set the executable bit on {what}, and on no other file.")
    return Act(ask, files, checks, solve(f.value.text),
               _blind(solve, f, f"chmod +x {d}/*"))


CONF_KEYS = {"number": ["listen_port", "max_clients", "cache_size", "worker_count"],
             "file": ["data_file", "pid_file", "socket_file", "index_file"]}


def fix_config(rng: random.Random, f: Found, taken: set[str]) -> Act:
    name = _free(rng, ["service.conf", "server.conf", "proxy.conf", "daemon.conf"], taken)
    key = rng.choice(CONF_KEYS[f.value.type])
    wrong = next(w for w in draw_values(rng, f.value.type, 6) if w != f.value.text and w not in f.decoys)
    other = [f"name = {rng.choice(WORDS)}", f"threads = {rng.choice([2, 4, 8])}", "log_level = info"]
    at = rng.randrange(1, len(other))
    have = [*other[:at], f"{key} = {wrong}", *other[at:]]
    want = [*other[:at], f"{key} = {f.value.text}", *other[at:]]

    def solve(x: str) -> list[str]:
        return [f"sed -i 's|^{key} = .*|{key} = {x}|' /app/{name}"]

    ask = phrase(rng, f"In /app/{name}, `{key}` is wrong: set it to {f.where}, leaving every other line unchanged.",
                 f"`{key}` in /app/{name} has the wrong value. Change it to {f.where}; keep every other line as it is.")
    return Act(ask,
               {name: "\n".join(have) + "\n"}, [lines_are(name, want)], solve(f.value.text),
               _blind(solve, f, f"sed -i 's|^{key} = .*|{key} = 8080|' /app/{name}"))


def fix_const(rng: random.Random, f: Found, taken: set[str]) -> Act:
    mod = _free(rng, ["settings.py", "limits.py", "tuning.py", "constants.py"], taken)
    const = rng.choice(["MAX_WORKERS", "TIMEOUT_MS", "PORT", "BATCH_SIZE"])
    wrong = rng.choice([1, 10, 100])
    head = ['"""Values the service reads at start."""', f'NAME = "{rng.choice(WORDS)}"']
    tail = ["DEBUG = False"]

    def solve(x: str) -> list[str]:
        return [f"sed -i 's/^{const} = .*/{const} = {x}/' /app/{mod}"]

    ask = phrase(rng, f"/app/{mod} sets `{const}` to the wrong number: set it to {f.where}, leaving the rest of the "
                 "file unchanged.",
                 f"Fix `{const}` in /app/{mod}: it must equal {f.where}. Change nothing else.")
    return Act(ask, {mod: "\n".join([*head, f"{const} = {wrong}", *tail]) + "\n"},
               [lines_are(mod, [*head, f"{const} = {f.value.text}", *tail])], solve(f.value.text),
               _blind(solve, f, f"sed -i 's/^{const} = .*/{const} = 42/' /app/{mod}"), python=True)


def fix_code(rng: random.Random, f: Found, taken: set[str]) -> Act:
    """main.py imports a module that does not exist; the value names the right one among decoy modules."""
    taken.add("main.py")
    wrong = next(w for w in (f"{x}_old" for x in rng.sample(WORDS, 5)) if w != f.value.text)
    mods = [f.value.text, *f.decoys]
    files = {f"{m}.py": f'def run():\n    return "{m} ready"\n' for m in mods}
    files["main.py"] = f'"""Runs the configured module."""\nfrom {wrong} import run\n\nprint(run())\n'

    def solve(x: str) -> list[str]:  # the wrong name is in main.py only: the demonstration never saw it
        return [f"sed -i 's/^from [A-Za-z0-9_]* import/from {x} import/' /app/main.py"]

    checks = [f'[ "$(python3 main.py 2>/dev/null)" = "{f.value.text} ready" ] || fail "main.py runs the right module"',
              *(f"grep -qx '    return \"{m} ready\"' {m}.py || fail 'module {m}.py is unchanged'" for m in mods),
              f"[ ! -e {wrong}.py ] || fail 'main.py imports the right module (no new module)'"]
    ask = phrase(rng, "`python3 /app/main.py` fails: it imports a module that does not exist. Change it to import the "
                 f"module whose name is {f.where} (edit only main.py).",
                 f"/app/main.py imports a missing module. Make it import the module named {f.where} instead; "
                 "edit only main.py.")
    return Act(ask, files, checks, solve(f.value.text),
               _blind(solve, f, "python3 /app/main.py"), python=True)


@dataclass(frozen=True)
class ActionDef:
    make: Make
    types: tuple[ValueType, ...]
    difficulty: str = "easy"
    exclude: tuple[str, ...] = ()  # sources it does not combine with


ACTIONS: dict[str, ActionDef] = {
    "write": ActionDef(write, ("number", "file")),
    "create": ActionDef(create, ("file",)),
    "rename": ActionDef(rename, ("file",)),
    "copy": ActionDef(copy, ("file",)),
    "delete": ActionDef(delete, ("file",)),
    "chmod": ActionDef(chmod, ("file",), exclude=("exec",)),  # that file is executable already
    "fixconf": ActionDef(fix_config, ("number", "file"), "medium"),
    "fixconst": ActionDef(fix_const, ("number",), "medium"),
    "fixcode": ActionDef(fix_code, ("ident",), "hard"),
}
