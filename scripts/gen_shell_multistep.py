"""Generate builtin:shell-multistep: tasks whose answer must be read from the sandbox first.

    .venv/bin/python scripts/gen_shell_multistep.py            # rewrite src/legorl/tasks/builtin/shell-multistep
    .venv/bin/python scripts/gen_shell_multistep.py --check    # change nothing; exit 1 when the dirs differ
    .venv/bin/python scripts/gen_shell_multistep.py --seed 7 --variants 6 --out /tmp/ms   # another draw

The task kinds live in multistep_kinds.py. The hidden values (file names, codes, counts, which
setting is wrong) are drawn once from `random.Random(f"{seed}:{kind}")` and committed: the task dirs
are data, this script is the code that made them. Rerun it after changing a kind, and commit both;
tests/tasks/test_shell_multistep.py fails while the committed dirs differ from what it generates.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from multistep_kinds import CAPACITY, KINDS, Spec

ROOT = Path(__file__).resolve().parents[1] / "src/legorl/tasks/builtin/shell-multistep"
SEED, VARIANTS = 22, 10  # 94 tasks: kinds with smaller pools make fewer (CAPACITY)
PACKAGED = (".toml", ".md", ".sh", ".py", ".json", ".txt")  # pyproject package-data; others get .txt
from legorl.tasks.generate.render import PY_GUARD  # noqa: E402  (one Dockerfile guard for both generators)

TEST_SH = """#!/bin/bash
# Verifier for shell-multistep/{id}: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() {{ echo "FAIL: $*"; exit 1; }}
(
  cd /app || fail "no /app"
{checks}
  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt
"""
SOLVE_SH = """#!/bin/bash
# Oracle for shell-multistep/{id}: what a solver types after reading the sandbox (answer inlined).
set -euo pipefail
cd /app
{lines}
"""
TASK_TOML = """schema_version = "1.4"
source = "builtin:shell-multistep"

[metadata]
difficulty = "{difficulty}"
category = "shell"
set = "shell-multistep"
kind = "{kind}"
variant = {variant}
tags = [{tags}]
blind_commands = [{blind}]

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 300.0
cpus = 1
memory_mb = 512
storage_mb = 512
allow_internet = false
workdir = "/app"
"""


def source_name(path: str) -> str:
    """The file's name under environment/: a packaged suffix, so wheels carry it."""
    return path if path.endswith(PACKAGED) else path + ".txt"


def toml_list(items: list[str]) -> str:
    return ", ".join('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in items)


def write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)


def write_task(spec: Spec, root: Path) -> None:
    d = root / spec.id
    env = d / "environment"
    docker = ["FROM ubuntu:24.04", *([PY_GUARD] if spec.python else []), "WORKDIR /app"]
    for rel in sorted(spec.files):
        write(env / source_name(rel), spec.files[rel], rel in spec.executable)
        docker.append(f"COPY {source_name(rel)} /app/{rel}")
    docker += [f"RUN {r}" for r in spec.runs]
    write(env / "Dockerfile", "\n".join(docker) + "\n")
    write(d / "instruction.md", spec.instruction + "\n")
    tags = ["shell", "multistep", *(["python"] if spec.python else [])]
    write(d / "task.toml", TASK_TOML.format(difficulty=spec.difficulty, kind=spec.kind, variant=spec.variant,
                                            tags=toml_list(tags), blind=toml_list(spec.blind)))
    checks = "\n".join("  " + line for line in spec.checks)
    write(d / "tests/test.sh", TEST_SH.format(id=spec.id, checks=checks), executable=True)
    for rel, text in spec.test_files.items():
        write(d / "tests" / rel, text)
    write(d / "solution/solve.sh", SOLVE_SH.format(id=spec.id, lines="\n".join(spec.solve)), executable=True)
    # the look-then-act episode as one command per turn: warm_start's demonstrations (docs/agent.md)
    write(d / "solution/demonstration.json", json.dumps({"commands": [*spec.look, *spec.solve]}, indent=1) + "\n")


def generate(root: Path, seed: int = SEED, variants: int = VARIANTS) -> list[Spec]:
    """Write every kind's variants under `root` (emptied first)."""
    if root.exists():
        shutil.rmtree(root)
    specs = [s for kind, make in KINDS.items()
             for s in make(random.Random(f"{seed}:{kind}"), min(variants, CAPACITY[kind]))]
    for spec in specs:
        write_task(spec, root)
    return specs


def differences(a: Path, b: Path) -> list[str]:
    """Paths (relative) whose presence, content or x bit differ between two trees."""
    def files(root: Path) -> dict[str, Path]:
        return {str(p.relative_to(root)): p for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}

    fa, fb = files(a), files(b)
    out = sorted(set(fa) ^ set(fb))
    for rel in sorted(set(fa) & set(fb)):
        same_x = (fa[rel].stat().st_mode & 0o111 != 0) == (fb[rel].stat().st_mode & 0o111 != 0)
        if not same_x or not filecmp.cmp(fa[rel], fb[rel], shallow=False):
            out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="where to write the set")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--variants", type=int, default=VARIANTS, help="tasks per kind, at most (a kind with a smaller pool makes fewer)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if --out differs")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp) / "set", args.seed, args.variants)
            diff = differences(Path(tmp) / "set", args.out)
        for rel in diff:
            print(f"differs: {args.out / rel}")
        print(f"{len(diff)} file(s) differ")
        return 1 if diff else 0
    specs = generate(args.out, args.seed, args.variants)
    print(f"wrote {len(specs)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
