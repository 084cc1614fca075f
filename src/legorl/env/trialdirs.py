"""Host-side bookkeeping for local sandboxes: where trial dirs live, which uid each trial runs as,
and sweeping what a crashed process left behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
from pathlib import Path

from legorl.env.base import SandboxError


class _UidPool:
    """Distinct uids per live trial, across processes: RLIMIT_NPROC is per uid, and file modes then
    separate trials. A uid is held by an flock on a file, released on stop or when the process dies."""

    def __init__(self, base: int = 61000, size: int = 1000) -> None:
        self.base, self.size = base, size
        self._held: dict[int, int] = {}  # uid -> fd of its lock file
        self._lock = threading.Lock()
        self._next = os.getpid() % size  # processes start at different offsets: fewer collisions

    def take(self, lock_dir: Path | None = None) -> int:
        lock_dir = lock_dir or Path(tempfile.gettempdir()) / "legorl-uids"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for _ in range(self.size):
                uid = self.base + self._next
                self._next = (self._next + 1) % self.size
                if uid in self._held:
                    continue
                fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self._held[uid] = fd
                return uid
        raise SandboxError(f"all {self.size} sandbox uids from {self.base} are in use")

    def give(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)


UIDS = _UidPool()


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "legorl-sandboxes"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(root_dir: Path | str | None = None) -> int:
    """Removes trial dirs and empty trial cgroups left by processes that died without `stop()`.

    Processes cannot outlive their exec (pid namespace + die-with-parent), so only files and empty
    cgroup directories can be left; returns how many trial dirs were removed."""
    from legorl.env.cgroups import layout

    root = Path(root_dir) if root_dir else default_root()
    removed = 0
    for d in root.iterdir() if root.is_dir() else []:
        try:
            owner = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not _alive(owner):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    for parent in set(layout().parents.values()):
        for cg in parent.glob("legorl-*"):
            owner = cg.name.split("-")[1]
            if owner.isdigit() and not _alive(int(owner)):
                with contextlib.suppress(OSError):
                    cg.rmdir()
    return removed
