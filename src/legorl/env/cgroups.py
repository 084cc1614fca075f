"""Per-trial cgroups for memory, pids and cpu limits, nested under this process's own cgroup.

rlimits are per process (and RLIMIT_NPROC is per uid), so they cannot bound a whole trial; a cgroup
can, and it also lets `stop()` find and kill every process a trial left behind. Supports cgroup v1
(one hierarchy per controller) and v2 (unified, needs the controllers delegated to our cgroup).
When the host does not allow it the sandbox runs without and says so once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CONTROLLERS = ("memory", "pids", "cpu")


@dataclass
class CgroupLayout:
    """Where each controller can be created: controller -> parent directory (ours)."""

    version: int  # 1, 2 or 0 (none): the first hierarchy found
    parents: dict[str, Path] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)  # controller -> 1 or 2 (hybrid hosts mix)
    reason: str = ""  # why some controller is missing


def _parse_mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of cgroup mounts from /proc/self/mountinfo."""
    out = []
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, post_fields = pre.split(), post.split()
        if len(fields) < 5 or len(post_fields) < 3:
            continue
        fstype = post_fields[0]
        if fstype in ("cgroup", "cgroup2"):
            out.append((fields[4], fstype, set(post_fields[2].split(","))))
    return out


def _parse_self(cgroup_file: str) -> dict[str, str]:
    """controller -> path of this process ("" key for the v2 unified path)."""
    out: dict[str, str] = {}
    for line in cgroup_file.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, ctrls, path = parts
        if not ctrls:
            out[""] = path
        for c in ctrls.split(","):
            out[c] = path
    return out


def detect(proc: Path = Path("/proc/self")) -> CgroupLayout:
    """Finds writable parents for each controller; v1 controllers win over v2 (they hold them here)."""
    try:
        mounts = _parse_mounts((proc / "mountinfo").read_text())
        own = _parse_self((proc / "cgroup").read_text())
    except OSError as e:
        return CgroupLayout(0, reason=f"cannot read cgroup info: {e}")
    layout = CgroupLayout(0)
    reasons = []
    for mnt, fstype, opts in mounts:
        if fstype != "cgroup":
            continue
        for c in CONTROLLERS:
            if c in opts and c not in layout.parents and c in own:
                parent = Path(mnt) / own[c].lstrip("/")
                if os.access(parent, os.W_OK):
                    layout.parents[c] = parent
                    layout.versions[c] = 1
                    layout.version = 1
                else:
                    reasons.append(f"{parent} not writable")
    missing = [c for c in CONTROLLERS if c not in layout.parents]
    v2 = next((m for m, f, _ in mounts if f == "cgroup2"), None)
    if missing and v2 is not None and "" in own:
        parent = Path(v2) / own[""].lstrip("/")
        try:
            available = set((parent / "cgroup.controllers").read_text().split())
        except OSError:
            available = set()
        want = [c for c in missing if c in available]
        if want:
            try:
                # Delegation: children may only use what the parent enables in subtree_control.
                (parent / "cgroup.subtree_control").write_text(" ".join("+" + c for c in want))
                for c in want:
                    layout.parents[c] = parent
                    layout.versions[c] = 2
                layout.version = layout.version or 2
            except OSError as e:
                reasons.append(f"cannot enable {want} in {parent}/cgroup.subtree_control: {e.strerror}")
    missing = [c for c in CONTROLLERS if c not in layout.parents]
    if missing:
        reasons.append(f"no usable cgroup controller for {', '.join(missing)}")
    layout.reason = "; ".join(reasons)
    return layout


_LAYOUT: CgroupLayout | None = None


def layout() -> CgroupLayout:
    """Detected once per process; the reason for any gap is logged once."""
    global _LAYOUT
    if _LAYOUT is None:
        _LAYOUT = detect()
        if _LAYOUT.reason:
            log.warning("sandbox cgroups limited: %s (rlimits still apply)", _LAYOUT.reason)
    return _LAYOUT


class TrialCgroup:
    """One cgroup per trial (per controller on v1). Every sandboxed process is put in at spawn."""

    def __init__(self, name: str, lay: CgroupLayout | None = None) -> None:
        self.layout = lay or layout()
        self.name = name
        self.dirs: dict[str, Path] = {}
        self.unavailable: list[str] = []

    def create(self, memory_mb: int | None, pids_max: int | None, cpus: float | None) -> None:
        made: dict[Path, Path] = {}
        for c in CONTROLLERS:
            parent = self.layout.parents.get(c)
            if parent is None:
                self.unavailable.append(c)
                continue
            d = made.get(parent)
            if d is None:
                d = parent / self.name
                try:
                    d.mkdir()
                except OSError as e:
                    log.warning("cannot create cgroup %s: %s", d, e)
                    self.unavailable.append(c)
                    continue
                made[parent] = d
            self.dirs[c] = d
        if memory_mb and "memory" in self.dirs:
            limit = str(memory_mb * 1024 * 1024)
            if self._is_v2("memory"):
                self._write("memory", "memory.max", limit)
                self._write("memory", "memory.swap.max", "0", optional=True)
            else:
                self._write("memory", "memory.limit_in_bytes", limit)
                self._write("memory", "memory.memsw.limit_in_bytes", limit, optional=True)
        if pids_max and "pids" in self.dirs:
            self._write("pids", "pids.max", str(pids_max))
        if cpus and "cpu" in self.dirs:
            period = 100_000
            quota = max(int(cpus * period), 1000)
            if self._is_v2("cpu"):
                self._write("cpu", "cpu.max", f"{quota} {period}")
            else:
                self._write("cpu", "cpu.cfs_period_us", str(period), optional=True)
                self._write("cpu", "cpu.cfs_quota_us", str(quota), optional=True)

    def _is_v2(self, c: str) -> bool:
        return self.layout.versions.get(c) == 2

    def _write(self, c: str, fname: str, value: str, optional: bool = False) -> None:
        try:
            (self.dirs[c] / fname).write_text(value)
        except OSError as e:
            if not optional:
                log.warning("cgroup %s: cannot set %s=%s: %s", c, fname, value, e)
                self.unavailable.append(f"{c}:{fname}")

    def procs_files(self) -> list[Path]:
        """The cgroup.procs of each distinct directory: writing a pid there moves it in."""
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                out.update(int(x) for x in f.read_text().split())
        return out

    def oom_kills(self) -> int:
        """Processes the kernel OOM-killed in this cgroup so far (0 where the kernel does not say)."""
        d = self.dirs.get("memory")
        if d is None:
            return 0
        for fname in ("memory.events", "memory.oom_control"):
            with contextlib.suppress(OSError):
                for line in (d / fname).read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        return 0

    def kill_all(self, deadline_s: float = 5.0) -> int:
        """SIGKILLs every process in the trial's cgroups until none is left; returns how many."""
        killed = 0
        for c, d in self.dirs.items():
            if self._is_v2(c):  # v2 (kernel >= 5.14): one write kills the whole cgroup
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
        end = time.monotonic() + deadline_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > end:
                return killed
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.005)

    def remove(self) -> None:
        self.kill_all()
        for d in dict.fromkeys(self.dirs.values()):
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)  # processes just killed take a moment to leave
            else:
                log.warning("cgroup %s could not be removed", d)
        self.dirs.clear()
