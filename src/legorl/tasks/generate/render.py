"""A `Spec` as a Harbor task dir, and `generate`: a whole distribution into one directory.

Layout per task: task.toml ([metadata] kind, value_source, action, value_type, variant, looks, blind_commands),
instruction.md, environment/ (Dockerfile + the files it COPYs), tests/test.sh, solution/solve.sh and
solution/demonstration.json (look commands then the oracle's, one per turn: the warm start's data).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from legorl.tasks.generate.kinds import make_spec, plan, select_kinds
from legorl.tasks.generate.parts import Spec

MANIFEST = "GENERATED.json"
PY_GUARD = ("RUN command -v python3 >/dev/null || (apt-get update \\\n"
            "    && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*)")
TEST_SH = """#!/bin/bash
# Verifier for {set}/{id}: reward 1 only if every check passes.
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
# Oracle for {set}/{id}: what a solver types after looking (answer inlined).
set -euo pipefail
cd /app
{lines}
"""
TASK_TOML = """schema_version = "1.4"
source = "{source}"

[metadata]
difficulty = "{difficulty}"
category = "shell"
set = "{set}"
kind = "{kind}"
value_source = "{value_source}"
action = "{action}"
value_type = "{value_type}"
variant = {variant}
looks = {looks}
seed = {seed}
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


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def _write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)


def write_task(spec: Spec, root: Path, set_name: str, seed: int) -> Path:
    d = root / spec.id
    env = d / "environment"
    docker = ["FROM ubuntu:24.04", *([PY_GUARD] if spec.python else []), "WORKDIR /app"]
    for rel in sorted(spec.files):
        _write(env / rel, spec.files[rel], rel in spec.executable)
        docker.append(f"COPY {rel} /app/{rel}")
    docker += [f"RUN {r}" for r in spec.runs]
    _write(env / "Dockerfile", "\n".join(docker) + "\n")
    _write(d / "instruction.md", spec.instruction + "\n")
    tags = ["shell", "multistep", "look-act", *(["python"] if spec.python else [])]
    _write(d / "task.toml", TASK_TOML.format(
        source=set_name, set=set_name, difficulty=spec.difficulty, kind=spec.kind, value_source=spec.source,
        action=spec.action, value_type=spec.value_type, variant=spec.variant, looks=spec.looks, seed=seed,
        tags=", ".join(map(toml_str, tags)), blind=", ".join(map(toml_str, spec.blind))))
    _write(d / "tests/test.sh", TEST_SH.format(set=set_name, id=spec.id, checks="\n".join(spec.checks)),
           executable=True)
    _write(d / "solution/solve.sh", SOLVE_SH.format(set=set_name, id=spec.id, lines="\n".join(spec.solve)),
           executable=True)
    _write(d / "solution/demonstration.json", json.dumps({"commands": [*spec.look, *spec.solve]}, indent=1) + "\n")
    return d


def generate(out: Path, n: int, seed: int = 0, kinds: list[str] | None = None, set_name: str = "look-act",
             overwrite: bool = False, phrasings: bool = False) -> list[Spec]:
    """`n` tasks (kinds round robin, matching `kinds` globs) under `out`, plus a manifest of what made them;
    `phrasings`: each task's request in one of several wordings."""
    chosen = select_kinds(kinds)
    if n < 1:
        raise ValueError("--n must be at least 1")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} is not empty: pass --overwrite to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    specs = [make_spec(kind, seed, variant, phrasings) for kind, variant in plan(n, seed, chosen)]
    for spec in specs:
        write_task(spec, out, set_name, seed)
    manifest = {"generator": "legorl.tasks.generate", "set": set_name, "n": n, "seed": seed,
                "kinds": kinds or [], "tasks_per_kind": {k.name: sum(s.kind == k.name for s in specs) for k in chosen}}
    if phrasings:  # only then: a set without them stays byte for byte what it was
        manifest["phrasings"] = True
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return specs
