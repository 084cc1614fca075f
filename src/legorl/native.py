"""Small C libraries and programs legorl builds once per machine with the system compiler (the engine's decode
kernels, the sandbox's trial helper): the compiler lookup, and a build cached under `$LEGORL_HOME/<dir>/` by a hash
of what went into it, renamed into place whole so concurrent builders never see a partial file."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from legorl.models.home import legorl_home


class BuildError(RuntimeError):
    """A compile or link failed (the message holds the command and its output)."""


def c_compiler() -> str | None:
    """`$CC` when it names a program, else cc / gcc / clang on PATH; None when there is none."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc) or (cc if Path(cc).is_file() else None)
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def cached_build(cc: str, subdir: str, name: str, key_parts: Sequence[str],
                 commands: Callable[[Path, Path], list[list[str]]]) -> Path:
    """`$LEGORL_HOME/<subdir>/<stem>-<hash><suffix>` for `name` = stem + suffix, the hash over `key_parts` and the
    compiler's version. Built when missing: `commands(tmp_dir, product)` run in order, then `product` renamed into
    place."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256("\0".join([*key_parts, version]).encode()).hexdigest()[:16]
    stem, suffix = os.path.splitext(name)
    out_dir = legorl_home() / subdir
    out = out_dir / f"{stem}-{key}{suffix}"
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        product = Path(tmp) / name
        for cmd in commands(Path(tmp), product):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise BuildError(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()[:500]}")
        os.replace(product, out)  # atomic: another process building the same key gets a whole file
    return out
