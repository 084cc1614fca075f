"""Tar streams for upload/download: the one file-transfer format every backend's API accepts.

Docker's put/get archive, `kubectl cp` and our bwrap `tar -x` all speak tar, so copying is one
code path; extraction on the host uses tarfile's `data` filter (no absolute paths, no links out).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
import tempfile
from pathlib import Path


def pack(src: Path, name: str) -> bytes:
    """A tar holding `src` (file or directory) under the single top-level entry `name`."""
    if not src.exists():
        raise FileNotFoundError(src)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(src), arcname=name, recursive=True)
    return buf.getvalue()


def unpack(data: bytes, name: str, dst: Path) -> None:
    """Extracts the entry `name` from a tar stream to the host path `dst` (replacing it)."""
    with tempfile.TemporaryDirectory(dir=dst.parent if dst.parent.exists() else None) as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            tar.extractall(tmp, filter="data")
        place(Path(tmp) / name, dst)


def place(got: Path, dst: Path) -> None:
    """Moves an extracted entry to `dst`, replacing what was there."""
    if not got.exists() and not got.is_symlink():
        raise FileNotFoundError(f"{got.name} not in archive")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    elif dst.exists() or dst.is_symlink():
        dst.unlink()
    shutil.move(str(got), str(dst))


def context_hash(env_dir: Path) -> str:
    """Content hash of a build context: same files -> same image tag -> built once."""
    h = hashlib.sha256()
    for p in sorted(env_dir.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(env_dir)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]
