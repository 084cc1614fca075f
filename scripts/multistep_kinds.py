"""The task kinds of builtin:shell-multistep: each makes seeded variants whose answer is in the sandbox.

A kind returns `Spec`s; `gen_shell_multistep.py` writes them as Harbor task dirs. Every variant of
a kind hides different values (names, numbers, which line is wrong), so the oracle of one variant
(a command with the answer inlined, as written after looking) scores 0 on its siblings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

WORDS = ["amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lumen", "maple", "nectar", "orchid", "pepper", "quartz", "raven", "sable", "thistle",
         "umber", "velvet", "willow", "yarrow", "zephyr", "cobalt", "falcon", "gable", "hazel", "iris"]
PEOPLE = ["Ana", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal",
          "Lena", "Mira", "Nils", "Omar", "Pia", "Quinn", "Rosa", "Sven", "Tara"]
CITIES = ["Lisbon", "Oslo", "Porto", "Riga", "Turin", "Ghent", "Lyon", "Bern", "Graz", "Cork"]


@dataclass
class Spec:
    """One task: files under /app, verifier checks (bash, run in /app), the oracle's lines."""

    kind: str
    variant: int
    difficulty: str
    instruction: str
    files: dict[str, str]
    checks: list[str]
    solve: list[str]
    blind: list[str] = field(default_factory=list)  # commands written without looking: must score 0
    look: list[str] = field(default_factory=list)  # what a solver runs first: with `solve`, the demonstration
    executable: set[str] = field(default_factory=set)  # paths under /app with the x bit
    runs: list[str] = field(default_factory=list)  # Dockerfile RUN lines after the COPYs
    test_files: dict[str, str] = field(default_factory=dict)  # extra files under tests/
    python: bool = False

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.variant}"


def content_is(path: str, value: str) -> str:
    """A check line: `path` exists and holds `value` (whitespace ignored)."""
    return (f'[ -f {path} ] && [ "$(tr -d " \\n\\t" < {path})" = "{value}" ] '
            f"|| fail '{path} holds {value}'")


def cat_create(rng: random.Random, n: int) -> list[Spec]:
    """The easiest kind: the look command is in the instruction; only its output is hidden."""
    specs = []
    for i, word in enumerate(rng.sample(WORDS, n), 1):
        name = f"{word}{rng.randint(1, 9)}.txt"
        specs.append(Spec("cat-create", i, "easy",
                          "Run `cat /app/name.txt`: it prints the name of a file. Create an empty file "
                          "with that name in /app.",
                          {"name.txt": name + "\n"}, [f"[ -f {name} ] || fail '{name} exists'"],
                          [f"touch /app/{name}"], blind=["touch /app/name.txt", "touch /app/file.txt"],
                          look=["cat /app/name.txt"]))
    return specs


def cat_number(rng: random.Random, n: int) -> list[Spec]:
    """Easy: the number is in a sentence, so copying the file is not the answer."""
    specs = []
    for i, num in enumerate(rng.sample(range(100, 999), n), 1):
        specs.append(Spec("cat-number", i, "easy",
                          "Run `cat /app/code.txt` to see a sentence with a number in it. Write just that "
                          "number into /app/answer.txt.",
                          {"code.txt": f"The code is {num}.\n"}, [content_is("answer.txt", str(num))],
                          [f"echo {num} > /app/answer.txt"],
                          blind=["cp /app/code.txt /app/answer.txt", "echo 42 > /app/answer.txt"],
                          look=["cat /app/code.txt"]))
    return specs


def note_create(rng: random.Random, n: int) -> list[Spec]:
    words, people = rng.sample(WORDS, n), rng.sample(PEOPLE, n)
    specs = []
    for i, (word, person) in enumerate(zip(words, people, strict=True), 1):
        name = f"{word}-{rng.randint(10, 99)}.txt"
        note = (f"# Note from {person}\n\nHi! Before the release, please create an empty file named\n"
                f"`{name}` in /app. Nothing needs to go in it.\n\nThanks, {person}\n")
        specs.append(Spec("note-create", i, "easy",
                          "Someone left a note for you in /app/NOTE.md. Read it and do what it asks.",
                          {"NOTE.md": note}, [f"[ -f {name} ] || fail '{name} exists'"], [f"touch /app/{name}"],
                          blind=["touch /app/done.txt", "touch /app/NOTE.txt"], look=["cat /app/NOTE.md"]))
    return specs


def note_write(rng: random.Random, n: int) -> list[Spec]:
    targets = rng.sample(["access.txt", "code.txt", "key.txt", "token.txt", "pin.txt", "secret.txt"], n)
    specs = []
    for i, target in enumerate(targets, 1):
        code = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
        msg = (f"The new access code is {code}.\n"
               f"Save just the code in /app/{target} so the deploy script can read it.\n")
        specs.append(Spec("note-write", i, "easy",
                          "/app/MESSAGE.txt says which code to save and where. Read it and save the code there.",
                          {"MESSAGE.txt": msg}, [content_is(target, code)], [f"echo {code} > /app/{target}"],
                          blind=["cp /app/MESSAGE.txt /app/code.txt", "echo 1234 > /app/code.txt"],
                          look=["cat /app/MESSAGE.txt"]))
    return specs


def config_read(rng: random.Random, n: int) -> list[Spec]:
    ports = rng.sample([p for p in range(2000, 9990, 7) if p != 8080], n)
    specs = []
    for i, port in enumerate(ports, 1):
        conf = (f"# server settings\nhost = 0.0.0.0\nadmin_port = {port + rng.randint(1, 9)}\nport = {port}\n"
                f"timeout = {rng.randint(5, 90)}\nworkers = {rng.randint(2, 16)}\n")
        specs.append(Spec("config-read", i, "easy",
                          "Which port does the server listen on? Look it up in /app/server.conf and write "
                          "just the number into /app/port.txt.",
                          {"server.conf": conf}, [content_is("port.txt", str(port))],
                          [f"echo {port} > /app/port.txt"],
                          blind=["echo 8080 > /app/port.txt", "echo 80 > /app/port.txt"], look=["cat /app/server.conf"]))
    return specs


def lookup(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    used: set[str] = set()
    for i in range(1, n + 1):
        people = rng.sample(PEOPLE, 8)
        ids = rng.sample(range(100, 999), 8)
        who = rng.randrange(1, 7)  # never the first or last row
        while people[who] in used:
            people[who] = rng.choice([p for p in PEOPLE if p not in people and p not in used])
        used.add(people[who])
        teams = [rng.choice(["web", "data", "ops", "mobile"]) for _ in people]
        csv = "id,name,team\n" + "".join(f"{u},{p},{t}\n" for u, p, t in zip(ids, people, teams, strict=True))
        ticket = (f"Ticket #{rng.randint(1000, 9999)}: the export button does nothing.\n"
                  f"Reported by user {ids[who]} on 2025-0{rng.randint(1, 9)}-{rng.randint(10, 28)}.\n")
        specs.append(Spec("lookup", i, "medium",
                          "Find out who reported the ticket in /app/ticket.txt (users are listed in "
                          "/app/users.csv) and write that person's name into /app/reporter.txt.",
                          {"ticket.txt": ticket, "users.csv": csv}, [content_is("reporter.txt", people[who])],
                          [f"echo {people[who]} > /app/reporter.txt"],
                          blind=["sed -n 2p /app/users.csv | cut -d, -f2 > /app/reporter.txt"],
                          look=["cat /app/ticket.txt", f"grep {ids[who]} /app/users.csv"]))
    return specs


def count_question(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    answers: set[int] = set()
    for i in range(1, n + 1):
        cities = rng.sample(CITIES, 5)
        counts = rng.sample(range(2, 10), 5)
        pick = rng.choice([j for j in range(5) if counts[j] not in answers])
        answers.add(counts[pick])
        rows = [c for c, k in zip(cities, counts, strict=True) for _ in range(k)]
        rng.shuffle(rows)
        csv = "id,customer,city,amount\n" + "".join(
            f"{1001 + j},{rng.choice(PEOPLE)},{c},{rng.randint(5, 400)}.{rng.randint(0, 99):02d}\n"
            for j, c in enumerate(rows))
        specs.append(Spec("count-question", i, "medium",
                          "Answer the question in /app/QUESTION.txt about /app/orders.csv. "
                          "Write just the number into /app/answer.txt.",
                          {"QUESTION.txt": f"How many orders in /app/orders.csv were shipped to {cities[pick]}?\n",
                           "orders.csv": csv},
                          [content_is("answer.txt", str(counts[pick]))], [f"echo {counts[pick]} > /app/answer.txt"],
                          blind=["wc -l < /app/orders.csv > /app/answer.txt",
                                 "grep -c , /app/orders.csv > /app/answer.txt"],
                          look=["cat /app/QUESTION.txt", f"grep -c {cities[pick]} /app/orders.csv"]))
    return specs


CONF_KEYS = {
    "name": lambda r: r.choice(WORDS) + "-svc",
    "port": lambda r: str(r.randint(3000, 9000)),
    "threads": lambda r: str(r.choice([2, 4, 8, 12, 16])),
    "cache_mb": lambda r: str(r.choice([64, 128, 256, 512, 1024])),
    "log_level": lambda r: r.choice(["debug", "info", "warning", "error"]),
    "region": lambda r: r.choice(["eu-west", "eu-north", "us-east", "ap-south"]),
}


def config_fix(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    for i, bad in enumerate(rng.sample(sorted(CONF_KEYS), n), 1):
        want = {k: gen(rng) for k, gen in CONF_KEYS.items()}
        have = dict(want)
        while have[bad] == want[bad]:
            have[bad] = CONF_KEYS[bad](rng)
        conf = "".join(f"{k}={v}\n" for k, v in have.items())
        doc = ("# Required settings for app.conf\n\n| key | required value |\n|---|---|\n"
               + "".join(f"| {k} | {v} |\n" for k, v in want.items()))
        checks = ["[ -f app.conf ] || fail 'app.conf exists'",
                  "expected=$(printf '%s\\n' " + " ".join(f"'{k}={v}'" for k, v in want.items()) + ")",
                  '[ "$(sed \'s/[[:space:]]*$//\' app.conf)" = "$expected" ] '
                  "|| fail 'app.conf holds exactly the required values'"]
        specs.append(Spec("config-fix", i, "medium",
                          "/app/app.conf must match the required values documented in /app/REQUIRED.md, but "
                          "one value in it is wrong. Find it and fix it in /app/app.conf, leaving every other "
                          "line unchanged.",
                          {"app.conf": conf, "REQUIRED.md": doc}, checks,
                          [f"sed -i 's/^{bad}=.*/{bad}={want[bad]}/' /app/app.conf"],
                          look=["cat /app/REQUIRED.md", "cat /app/app.conf"]))
    return specs


CHECK_SH = """#!/bin/bash
# Validates /app/service.env: prints the first problem and exits 1, else exits 0.
f=/app/service.env
[ -f "$f" ] || { echo "check: $f is missing"; exit 1; }
get() { sed -n "s/^$1=//p" "$f" | tail -n 1; }
num() { case "$2" in ''|*[!0-9]*) return 1;; esac; [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; }
v=$(get WORKERS); num WORKERS "$v" 1 16 || { echo "check: WORKERS=$v is invalid: must be a number from 1 to 16"; exit 1; }
v=$(get MODE); case "$v" in safe|strict) ;; *) echo "check: MODE=$v is invalid: must be safe or strict"; exit 1;; esac
v=$(get RETRIES); num RETRIES "$v" 0 5 || { echo "check: RETRIES=$v is invalid: must be a number from 0 to 5"; exit 1; }
v=$(get PORT); num PORT "$v" 1024 65535 || { echo "check: PORT=$v is invalid: must be a number from 1024 to 65535"; exit 1; }
v=$(get DATA_DIR); [ -n "$v" ] && [ -d "$v" ] || { echo "check: DATA_DIR=$v is not an existing directory (the data is in /app/data)"; exit 1; }
echo "check: service.env is valid"
"""
SERVICE = {
    "WORKERS": (lambda r: str(r.randint(1, 16)), ["0", "32", "64", "99"]),
    "MODE": (lambda r: r.choice(["safe", "strict"]), ["fast", "turbo", "debug", "loose"]),
    "RETRIES": (lambda r: str(r.randint(0, 5)), ["7", "9", "12", "50"]),
    "PORT": (lambda r: str(r.randint(1024, 9999)), ["80", "443", "22", "99999"]),
    "DATA_DIR": (lambda r: "/app/data", ["/app/dta", "/app/datta", "/app/dat", "/app/date"]),
}


def config_error(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    for i, bad in enumerate(rng.sample(sorted(SERVICE), n), 1):
        good = {k: gen(rng) for k, (gen, _) in SERVICE.items()}
        env = dict(good, **{bad: rng.choice(SERVICE[bad][1])})
        fix = good[bad]
        checks = ["[ -f service.env ] || fail 'service.env exists'",
                  "bash /tests/check.sh >/dev/null || fail 'check.sh passes'"]
        checks += [f"grep -qx '{k}={v}' service.env || fail '{k} still {v}'" for k, v in good.items() if k != bad]
        specs.append(Spec("config-error", i, "hard",
                          "/app/check.sh validates /app/service.env and currently fails. Run it, read its "
                          "error and fix /app/service.env (do not edit check.sh) so that the check passes; "
                          "leave the settings it does not complain about as they are.",
                          {"service.env": "".join(f"{k}={v}\n" for k, v in env.items()), "check.sh": CHECK_SH,
                           "data/README.txt": "service data\n"},
                          checks, [f"sed -i 's|^{bad}=.*|{bad}={fix}|' /app/service.env"],
                          blind=["bash /app/check.sh"], executable={"check.sh"}, test_files={"check.sh": CHECK_SH},
                          look=["bash /app/check.sh"]))
    return specs


def build_sh(out: str, version: str, tool: str, src: str) -> str:
    return f"""#!/bin/bash
# Builds the release into /app/{out}. Run from anywhere.
cd /app || exit 1
[ -d {out} ] || {{ echo "build.sh: error: output directory /app/{out} does not exist; create it"; exit 1; }}
have=$(cat VERSION 2>/dev/null | tr -d ' \\n')
[ "$have" = "{version}" ] || {{ echo "build.sh: error: /app/VERSION says '$have' but this build needs {version}"; exit 1; }}
[ -f src/{src} ] || {{ echo "build.sh: error: input file /app/src/{src} not found (an empty file is enough)"; exit 1; }}
[ -x tools/{tool} ] || {{ echo "build.sh: error: /app/tools/{tool} is not executable (chmod +x it)"; exit 1; }}
./tools/{tool} > {out}/release.txt || {{ echo "build.sh: error: tools/{tool} failed"; exit 1; }}
echo "build.sh: ok"
"""


def script_error(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    for i, broken in enumerate(rng.sample(["out", "version", "src", "tool"], n), 1):
        out, src = rng.choice(["dist", "build", "release", "public"]), f"{rng.choice(WORDS)}.txt"
        tool = f"{rng.choice(['pack', 'stamp', 'bundle', 'seal'])}.sh"
        version = f"{rng.randint(1, 4)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
        script = build_sh(out, version, tool, src)
        files = {"build.sh": script, f"tools/{tool}": "#!/bin/bash\necho release\n", f"{out}/README.txt": "build output goes here\n",
                 f"src/{src}": "input\n", "VERSION": version + "\n"}
        executable = {"build.sh", f"tools/{tool}"}
        if broken == "out":
            del files[f"{out}/README.txt"]
            fix = f"mkdir -p /app/{out}"
        elif broken == "version":
            files["VERSION"] = f"{version.split('.')[0]}.{rng.randint(0, 9)}.{rng.randint(10, 19)}\n"
            fix = f"echo {version} > /app/VERSION"
        elif broken == "src":
            del files[f"src/{src}"]
            files["src/notes.txt"] = "sources go here\n"
            fix = f"touch /app/src/{src}"
        else:
            executable.discard(f"tools/{tool}")
            fix = f"chmod +x /app/tools/{tool}"
        specs.append(Spec("script-error", i, "medium",
                          "Running /app/build.sh fails. Run it, read its error, and fix what it complains "
                          "about (do not edit build.sh) so that it succeeds.",
                          files, ["bash /tests/build.sh >/dev/null || fail 'build.sh succeeds'"], [fix],
                          blind=["bash /app/build.sh", "chmod +x /app/build.sh"], executable=executable,
                          test_files={"build.sh": script}, look=["bash /app/build.sh"]))
    return specs


def newest_file(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    for i in range(1, n + 1):
        senders = sorted(rng.sample([p.lower() for p in PEOPLE], 5))
        names = [f"{w}-{rng.randint(10, 99)}.txt" for w in rng.sample(WORDS, 5)]
        order = list(range(5))
        rng.shuffle(order)
        while order[-1] in (0, 4):  # the newest is neither first nor last by name
            rng.shuffle(order)
        files, runs = {}, []
        for rank, j in enumerate(order):
            files[f"inbox/req-{senders[j]}.txt"] = f"From {senders[j]}: please create an empty file /app/{names[j]}\n"
            runs.append(f"touch -d '2025-0{rank + 3}-1{rng.randint(0, 9)} 09:00' inbox/req-{senders[j]}.txt")
        new = order[-1]
        checks = [f"[ -f {names[new]} ] || fail '{names[new]} exists'"]
        checks += [f"[ ! -e {names[j]} ] || fail 'the stale request for {names[j]} was not done'"
                   for j in range(5) if j != new]
        specs.append(Spec("newest-file", i, "medium",
                          "/app/inbox/ holds several requests; only the most recently modified one is still "
                          "current. Do what that one asks, and nothing the older ones ask.",
                          files, checks, [f"touch /app/{names[new]}"], runs=[" && ".join(runs)],
                          look=["ls -t /app/inbox", f"cat /app/inbox/req-{senders[new]}.txt"]))
    return specs


MAIN_PY = """from util import {name}

with open("/app/data.txt") as f:
    print("total:", {name}(f.read().split()))
"""
FUNCS = {"sum_values": "sum_valeus", "add_all": "add_al", "total_of": "totl_of", "count_up": "cuont_up",
         "tally": "taly"}


def py_import(rng: random.Random, n: int) -> list[Spec]:
    specs = []
    totals: set[int] = set()
    for i, name in enumerate(rng.sample(sorted(FUNCS), n), 1):
        nums = [rng.randint(1, 99) for _ in range(rng.randint(4, 9))]
        while sum(nums) in totals:
            nums[0] += 1
        totals.add(sum(nums))
        typo = FUNCS[name]
        util = f'"""Small helpers."""\n\n\ndef {typo}(items):\n    return sum(int(x) for x in items)\n'
        specs.append(Spec("py-import", i, "hard",
                          "`python3 /app/main.py` crashes. Run it, read the error and fix the code so that it "
                          "prints its total.",
                          {"main.py": MAIN_PY.format(name=name), "util.py": util,
                           "data.txt": " ".join(map(str, nums)) + "\n"},
                          ['out=$(python3 main.py 2>/dev/null)',
                           f'[ "$out" = "total: {sum(nums)}" ] || fail "main.py prints total: {sum(nums)}"'],
                          [f"sed -i 's/def {typo}(/def {name}(/' /app/util.py"],
                          blind=["python3 /app/main.py"], python=True,
                          look=["python3 /app/main.py", "cat /app/util.py"]))
    return specs


KINDS: dict[str, Callable[[random.Random, int], list[Spec]]] = {
    "cat-create": cat_create,
    "cat-number": cat_number,
    "note-create": note_create,
    "note-write": note_write,
    "config-read": config_read,
    "lookup": lookup,
    "count-question": count_question,
    "config-fix": config_fix,
    "script-error": script_error,
    "newest-file": newest_file,
    "config-error": config_error,
    "py-import": py_import,
}
# The most variants each kind can make with distinct answers (its pools: six target files, four broken build
# steps, eight possible counts, ...). The generator asks for min(--variants, this).
CAPACITY: dict[str, int] = {
    "cat-create": 10, "cat-number": 10, "note-create": 10, "note-write": 6, "config-read": 10, "lookup": 10,
    "count-question": 8, "config-fix": 6, "script-error": 4, "newest-file": 10, "config-error": 5, "py-import": 5,
}
