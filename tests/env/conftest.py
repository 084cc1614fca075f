"""Fixtures for sandbox tests: tiny Harbor-format task dirs and a private sandbox root per test."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from legorl.tasks.model import Task, TaskLimits


def write_task(
    root: Path,
    files: dict[str, str] | None = None,
    tests: dict[str, str] | None = None,
    solution: dict[str, str] | None = None,
    task_id: str = "t",
    **kw: object,
) -> Task:
    """A task directory: `files` go to environment/, `tests` to tests/, `solution` to solution/."""
    root.mkdir(parents=True, exist_ok=True)
    for sub, content in (("environment", files), ("tests", tests), ("solution", solution)):
        (root / sub).mkdir(exist_ok=True)
        for name, text in (content or {}).items():
            p = root / sub / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    limits = kw.pop("limits", TaskLimits(memory_mb=512))
    return Task(id=task_id, path=root, instruction="do it", limits=limits, **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def private_build_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test builds its Dockerfiles for real (the cache is shared across runs otherwise)."""
    monkeypatch.setenv("LEGORL_BUILD_CACHE", str(tmp_path / "build-cache"))


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    """A sandbox root under /tmp (pytest's tmp_path is 0700, the sandbox uid could not traverse it)."""
    root = Path("/tmp") / f"legorl-envtest-{uuid.uuid4().hex[:8]}"
    yield root
    leftovers = list(root.iterdir()) if root.exists() else []
    shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"sandbox dirs left behind: {leftovers}"


@pytest.fixture
def make_task(tmp_path: Path) -> Callable[..., Task]:
    n = iter(range(1000))

    def make(**kw: object) -> Task:
        return write_task(tmp_path / f"task{next(n)}", **kw)  # type: ignore[arg-type]

    return make
