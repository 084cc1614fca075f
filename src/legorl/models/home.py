"""The model store's mechanics: where prepared models live and how one is built into place.

No registry here: an entry brings its own build function, so builders that need another prepared
model (the tiny models reuse SmolLM2's tokenizer) can prepare it without importing the registry.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"
REVISION_FILE = ".legorl-revision"


class ModelNotFoundError(FileNotFoundError):
    """A model spec that is neither a registered name nor a directory with an HF config."""


def legorl_home() -> Path:
    return Path(os.environ.get("LEGORL_HOME", Path.home() / ".cache" / "legorl")).expanduser()


def models_dir() -> Path:
    return legorl_home() / "models"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    build: Callable[[Path], None]
    revision: str = "1"  # bump when the build changes: prepared copies of older revisions are rebuilt


def is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def stored_path(entry: ModelEntry) -> Path | None:
    """The prepared copy of `entry` when it is current, else None."""
    path = models_dir() / entry.name
    rev = path / REVISION_FILE
    current = is_model_dir(path) and rev.is_file() and rev.read_text().strip() == entry.revision
    return path if current else None


def prepare_entry(entry: ModelEntry, force: bool = False) -> Path:
    """Build `entry` into the store (idempotent; atomic via a temp dir + rename)."""
    out = models_dir() / entry.name
    if not force and stored_path(entry) is not None:
        return out
    tmp = out.with_name(f".{entry.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        entry.build(tmp)
        (tmp / REVISION_FILE).write_text(entry.revision)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
