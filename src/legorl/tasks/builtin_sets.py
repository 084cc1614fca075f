"""Task sets shipped inside the package (`src/legorl/tasks/builtin/<set>/<task>/`).

They give every install something to train and evaluate on without a download: `shell-basics`
for small models, `shell-multistep` (read the sandbox, then act: multi-turn), `py-bugfix`
(SWE-bench style) for real agents. Generated sets (`look-act`) are not shipped as files: they are drawn on
first use into `$LEGORL_HOME/tasks/` (`legorl.tasks.generate.builtin`) and load like the others.
"""

from __future__ import annotations

from pathlib import Path

from legorl.tasks.model import Task
from legorl.tasks.taskdir import TaskValidationError, collect_dirs, errors, find_task_dirs

BUILTIN_ROOT = Path(__file__).parent / "builtin"
DESCRIPTIONS = {
    "shell-basics": "one-command terminal tasks (files, text tools, tiny scripts); for small models",
    "shell-multistep": "look-then-act terminal tasks: the answer is in the sandbox (seeded hidden values)",
    "py-bugfix": "small Python repos with failing pytest suites (fail-to-pass + pass-to-pass)",
}


def builtin_sets() -> list[str]:
    """Names of the shipped sets."""
    if not BUILTIN_ROOT.is_dir():
        return []
    return sorted(p.name for p in BUILTIN_ROOT.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def generated_sets() -> list[str]:
    """Names of the sets drawn by the generator on first use (not under BUILTIN_ROOT)."""
    from legorl.tasks.generate.builtin import GENERATED

    return sorted(GENERATED)


def builtin_path(name: str) -> Path:
    if name in generated_sets():
        from legorl.tasks.generate.builtin import generated_path

        return generated_path(name)
    path = BUILTIN_ROOT / name
    if name not in builtin_sets():
        known = ", ".join(builtin_sets() + generated_sets())
        raise KeyError(f"unknown built-in task set {name!r}; available: {known}")
    return path


def load_builtin(name: str) -> list[Task]:
    """All tasks of one built-in set, with source `builtin:<name>`."""
    tasks, problems = collect_dirs(builtin_path(name), source=f"builtin:{name}")
    if errors(problems):
        raise TaskValidationError(errors(problems))
    return tasks


def builtin_count(name: str) -> int:
    return len(find_task_dirs(builtin_path(name)))
