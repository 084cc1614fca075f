"""Root builds of a task's Dockerfile into a cached copy-on-write layer (see `legorl.env.rootfs`).

The layer is keyed by the hash of the Dockerfile and its context (and the workdir), built once per
host under a lock, and reused by every later trial. A trial gets the layer read-only as its system
(/usr /etc /var /opt) and fresh writable copies of the directories the Dockerfile named with
WORKDIR or VOLUME, owned by the trial's uid.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import shutil
import tarfile
import time
import uuid
from pathlib import Path, PurePosixPath

from legorl.env import archive, rootfs
from legorl.env import dockerfile as df
from legorl.env.localbuild import BuildTarget, _Build, _copy_into, cache_root, prepare_workdir, run_failed

log = logging.getLogger(__name__)
_VERSION = "layer2"  # bump when the layer's layout or meta changes (layer2: Docker ENV expansion, service)
# Trials of one process wait for a layer here, not in a thread each: a thread pool full of trials
# blocked on the file lock would leave none for the build they wait for.
_BUILDING: dict[tuple[int, str], asyncio.Lock] = {}  # (event loop, layer) -> lock


def layer_key(sb: BuildTarget) -> str:
    env_dir = sb.task.environment_dir
    return f"{_VERSION}-{archive.context_hash(env_dir)}-{sb.task.workdir.strip('/').replace('/', '_')}"


class _LayerBuild(_Build):
    """Runs the instructions into `layer/upper`: RUN as root in the overlay, COPY straight into it."""

    def __init__(self, sb: BuildTarget, path: Path, layer: Path) -> None:
        super().__init__(sb, path)
        self.layer, self.upper = layer, layer / "upper"
        self.env: dict[str, str] = {}  # ENV lines only: task.toml's env tables are the trial's, not the layer's
        self.user: str | None = None
        self.writable: list[str] = [sb.task.workdir]
        self.notes: list[str] = []
        self.cwd = "/"  # as in Docker until the first WORKDIR; trials start in the task's workdir
        self.workdir = sb.task.workdir

    def _vars(self) -> dict[str, str]:
        return {**self.args, **self.env}

    def in_upper(self, ins: df.Instruction, path: str) -> Path:
        """The upper-dir path for a sandbox path; parents that are symlinks on the host are followed
        as the merged view would (COPY to /bin/x lands in /usr/bin/x), never out of the layer."""
        norm = PurePosixPath(os.path.normpath(path))
        parent = str(norm.parent)
        if not (self.upper / parent.lstrip("/")).exists() and os.path.exists(parent):
            real = os.path.realpath(parent)
            norm = PurePosixPath(real) / norm.name
        host = self.upper / str(norm).lstrip("/")
        if not os.path.realpath(host).startswith(os.path.realpath(self.upper) + os.sep):
            raise self._err(ins, f"{path} escapes the image layer")
        return host

    async def run(self, instructions: list[df.Instruction]) -> None:
        for ins in instructions:
            kw = ins.keyword
            if kw == "FROM":
                self.notes.append(df.map_from(ins.args.split()[0]))
            elif kw in ("WORKDIR", "VOLUME"):
                paths = [ins.args] if kw == "WORKDIR" else df.words(ins, self.path)
                for p in paths:
                    target = self._abs(df.substitute(p, self._vars()))
                    self.in_upper(ins, target + "/x").parent.mkdir(parents=True, exist_ok=True)
                    if target not in self.writable and target not in (*rootfs.LAYER_SYSTEM, "/"):
                        self.writable.append(target)
                    if kw == "WORKDIR":
                        self.cwd = self.workdir = target
            elif kw == "ENV":
                self.env.update({k: v or "" for k, v in df.env_pairs(ins, self.path, self._vars())})
            elif kw == "ARG":
                for k, v in df.env_pairs(ins, self.path, self._vars()):
                    if v is not None:
                        self.args.setdefault(k, v)
            elif kw in ("ENTRYPOINT", "CMD"):
                self.service[kw.lower()] = df.command_form(ins, self.shell)
            elif kw == "USER":
                self.user = df.substitute(ins.args.split(":")[0], self._vars()) or None
            elif kw == "SHELL":
                self.shell = df.shell_form(ins, self.path)
            elif kw in ("COPY", "ADD"):
                await asyncio.to_thread(self.copy, ins)
            elif kw == "RUN":
                await self.run_line(ins)

    def copy(self, ins: df.Instruction) -> None:
        files, dst = self.sources(ins)
        target = self._abs(dst)
        into_dir = dst.endswith("/") or len(files) > 1 or self.in_upper(ins, target).is_dir() \
            or (os.path.isdir(target) and not self.in_upper(ins, target).exists())
        for f in files:
            if f.is_dir():
                host = self.in_upper(ins, target + "/x").parent
                host.mkdir(parents=True, exist_ok=True)
                _copy_into(f, host)
            elif ins.keyword == "ADD" and tarfile.is_tarfile(f):
                host = self.in_upper(ins, target + "/x").parent
                host.mkdir(parents=True, exist_ok=True)
                with tarfile.open(f) as tar:
                    tar.extractall(host, filter="data")
            else:
                dest = self.in_upper(ins, f"{target}/{f.name}" if into_dir else target)
                dest.parent.mkdir(parents=True, exist_ok=True)
                _copy_into(f, dest)

    async def run_line(self, ins: df.Instruction) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._err(ins, f"build timeout ({self.sb.task.build_timeout_sec:.0f}s) exceeded")
        cmd = [*self.shell, df.run_command(ins)]
        if self.user and self.user not in ("root", "0"):
            cmd = ["/usr/sbin/runuser", "-u", self.user, "--", *cmd]
        cg = self.sb.cgroup.procs_files() if getattr(self.sb, "cgroup", None) else []
        out = await rootfs.run_in_layer(self.layer, cmd, self.cwd, {**self.args, **self.env}, left, cg)
        if out.exit_code != 0:
            raise run_failed(self.path, ins, "timed out" if out.timed_out else f"exit code {out.exit_code}", out)


async def _build_into(sb: BuildTarget, instructions: list[df.Instruction], tmp: Path, final: Path) -> Path:
    for sub in ("upper", "work", "merged"):
        (tmp / sub).mkdir(parents=True)
    try:
        await asyncio.to_thread(rootfs.seed_upper, tmp / "upper")
        (tmp / "upper" / sb.task.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        b = _LayerBuild(sb, sb.task.environment_dir / "Dockerfile", tmp)
        t0 = time.monotonic()
        await b.run(instructions)
        meta = {"env": b.env, "cwd": b.workdir, "writable": b.writable, "user": b.user, "notes": b.notes,
                "service": b.service,
                "build_s": round(time.monotonic() - t0, 2)}
        (tmp / "meta.json").write_text(json.dumps(meta))
        shutil.rmtree(tmp / "work", ignore_errors=True)
        tmp.rename(final)
    finally:
        if tmp.exists():
            await rootfs.remove(tmp)
    return final


async def ensure_layer(sb: BuildTarget, instructions: list[df.Instruction]) -> Path:
    """The built layer for this task's Dockerfile: from the cache, or built now (once per host).
    Without the build cache the layer is the trial's own, removed with its dir."""
    if not sb.build_cache:
        assert sb.root is not None
        return await _build_into(sb, instructions, sb.root / ".layer-build", sb.root / "layer")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    final = root / layer_key(sb)
    if (final / "meta.json").is_file():
        return final
    async with _BUILDING.setdefault((id(asyncio.get_running_loop()), final.name), asyncio.Lock()):
        if (final / "meta.json").is_file():
            return final
        return await _locked_build(sb, instructions, root, final)


async def _locked_build(sb: BuildTarget, instructions: list[df.Instruction], root: Path, final: Path) -> Path:
    """Builds `final` holding its file lock (other processes building it wait, then reuse it)."""
    lock = os.open(root / f"{final.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        if (final / "meta.json").is_file():  # another trial built it while we waited
            return final
        for old in root.glob(f".{final.name}.*"):  # a build killed mid-way (we hold the lock)
            await rootfs.remove(old)
        return await _build_into(sb, instructions, root / f".{final.name}.{uuid.uuid4().hex[:8]}", final)
    finally:
        os.close(lock)


def apply_layer(sb: BuildTarget, layer: Path) -> dict:
    """Gives the trial the layer: read-only system, fresh writable copies of its work dirs."""
    meta = json.loads((layer / "meta.json").read_text())
    assert sb.root is not None
    for path in meta["writable"]:
        host = sb.binds.get(path)
        if host is None:
            host = sb.root / "extra" / path.strip("/").replace("/", "__")
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o700)
            sb.binds[path] = host
        rootfs.copy_out(layer / "upper", path, host)
        sb.own_tree(host)
    sb.env.update(meta["env"])
    sb.cwd = meta["cwd"]
    sb.service = meta.get("service", {})
    sb.layer = layer  # type: ignore[attr-defined]
    return meta


async def prepare(sb: BuildTarget) -> dict | None:
    """Fills the trial from the task's environment/: a root build when this host can (returns the
    layer's meta), else the unprivileged subset of `legorl.env.localbuild` (returns None)."""
    dockerfile = sb.task.environment_dir / "Dockerfile"
    if not dockerfile.is_file() or not sb.root_builds or not rootfs.available(cache_root()):
        await prepare_workdir(sb)
        return None
    instructions = df.parse(dockerfile)
    layer = await ensure_layer(sb, instructions)
    return await asyncio.to_thread(apply_layer, sb, layer)
