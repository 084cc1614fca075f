"""Bring converted tasks' verifier code up to date with this legorl.

    .venv/bin/python scripts/refresh_task_verifiers.py            # the shipped builtin:py-bugfix set
    .venv/bin/python scripts/refresh_task_verifiers.py DIR ...    # your own converted task dirs
    .venv/bin/python scripts/refresh_task_verifiers.py --check    # report only; exit 1 when stale

The built-in task sets are data: the committed directories under src/legorl/tasks/builtin/<set>/
are their single source of truth, edited in place like any Harbor task (except shell-multistep,
which scripts/gen_shell_multistep.py generates). The one derived part is the verifier code that `legorl tasks convert`
copies into every converted task (tests/test.sh, tests/grading/): after changing the converter or
src/legorl/tasks/_verifier/, run this and commit the result (tests/tasks/test_builtin.py fails until
you do). Tasks without tests/config.json (not converted, e.g. shell-basics) are left alone.
"""

from __future__ import annotations

import argparse
import sys

from legorl.tasks.builtin_sets import builtin_path
from legorl.tasks.convert import refresh_verifier
from legorl.tasks.loader import find_task_dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", help="task dirs or dirs of them (default: builtin py-bugfix)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any file is stale")
    args = parser.parse_args(argv)
    stale = 0
    for root in args.dirs or [builtin_path("py-bugfix")]:
        for task_dir in find_task_dirs(root):
            if not (task_dir / "tests/config.json").is_file():
                continue
            for rel in refresh_verifier(task_dir, write=not args.check):
                stale += 1
                print(f"{'stale' if args.check else 'rewrote'}: {task_dir / rel}")
    print(f"{stale} file(s) {'stale' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
