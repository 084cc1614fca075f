"""Regenerate the built-in task sets: `python src/legorl/tasks/builtin/_generate.py`.

The generated task dirs are committed; this script is the source of truth for their content.
shell-basics comes from `_shell_specs.py`; py-bugfix from the records in `_pybugfix_records*.py`,
through the same converter users run (`legorl tasks convert`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import tomli_w

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _shell_specs import SPECS, Spec  # noqa: E402

from legorl.tasks.convert import convert_records  # noqa: E402

# Guarded: a no-op where python3 exists (the local backend runs RUN lines offline on the host).
APT_PYTHON = ("RUN command -v python3 >/dev/null || (apt-get update \\\n"
              "    && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*)\n")


def _dockerfile(spec: Spec) -> str:
    tops = sorted({f.split("/", 1)[0] + ("/" if "/" in f else "") for f in spec.files})
    return ("FROM ubuntu:24.04\n" + (APT_PYTHON if spec.python else "") + "WORKDIR /app\n"
            + "".join(f"COPY {t} /app/{t}\n" for t in tops))


def _test_sh(spec: Spec) -> str:
    lines = "".join(f"  {cond} || fail {_q(desc)}\n" for cond, desc in spec.checks)
    return f"""#!/bin/bash
# Verifier for shell-basics/{spec.name}: reward 1 only if every check passes.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() {{ echo "FAIL: $*"; exit 1; }}
(
  cd /app || fail "no /app"
{lines}  echo "all checks passed"
) && echo 1 > /logs/verifier/reward.txt
"""


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def write_shell_basics(root: Path) -> None:
    out = root / "shell-basics"
    shutil.rmtree(out, ignore_errors=True)
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names)), "duplicate shell-basics names"
    for spec in SPECS:
        d = out / spec.name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "solution").mkdir()
        config = {
            "schema_version": "1.4",
            "source": "builtin:shell-basics",
            "metadata": {"difficulty": "easy", "category": "shell", "set": "shell-basics",
                         "tags": ["shell", *spec.tags] + (["python"] if spec.python else [])},
            "verifier": {"timeout_sec": 30.0},
            "agent": {"timeout_sec": 120.0},
            "environment": {"build_timeout_sec": 300.0, "cpus": 1, "memory_mb": 512, "storage_mb": 512,
                            "allow_internet": False, "workdir": "/app"},
        }
        (d / "task.toml").write_text(tomli_w.dumps(config))
        (d / "instruction.md").write_text(spec.instruction.strip() + "\n")
        (d / "environment/Dockerfile").write_text(_dockerfile(spec))
        for rel, text in spec.files.items():
            (d / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / "environment" / rel).write_text(text)
        (d / "tests/test.sh").write_text(_test_sh(spec))
        (d / "solution/solve.sh").write_text(
            f"#!/bin/bash\n# Oracle for shell-basics/{spec.name}.\nset -euo pipefail\ncd /app\n{spec.solve}\n")
        for sh in (d / "tests/test.sh", d / "solution/solve.sh"):
            sh.chmod(0o755)


def write_py_bugfix(root: Path) -> None:
    import _pybugfix_records4  # noqa: F401  (loads every record file)
    from _pybugfix_records import RECORDS

    out = root / "py-bugfix"
    shutil.rmtree(out, ignore_errors=True)
    convert_records(RECORDS, out, source="builtin:py-bugfix")


if __name__ == "__main__":
    write_shell_basics(HERE)
    write_py_bugfix(HERE)
    print("regenerated", ", ".join(p.name for p in sorted(HERE.iterdir()) if p.is_dir() and p.name[0] != "_"))
