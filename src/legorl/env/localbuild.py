"""Fills a local sandbox's workdir from the task's environment/: plain files, or a Dockerfile subset.

Without a Dockerfile the environment files are the workdir content. With one, only what it COPYs
lands in the sandbox (as in an image build) and its RUN lines execute inside the sandbox at setup.
Builds start in the task's workdir (Harbor's template sets `WORKDIR /app` anyway).
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import tarfile
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Protocol

from legorl.env import archive, procs
from legorl.env import dockerfile as df
from legorl.env.base import SandboxError
from legorl.env.output import tail
from legorl.tasks.model import Task


class BuildTarget(Protocol):
    """What a build needs from the sandbox it fills (LocalSandbox is the one implementation).

    A protocol rather than the class itself, so this module sits below `legorl.env.local`.
    """

    task: Task
    root: Path | None
    binds: dict[str, Path]  # sandbox path -> host dir; a build adds binds for new dirs
    env: dict[str, str]  # the Dockerfile's ENV lines land here
    service: dict[str, list[str]]  # its ENTRYPOINT / CMD (argv each)
    cwd: str
    network: bool
    build_cache: bool
    root_builds: bool  # RUN as root over a copy-on-write host root (legorl.env.layerbuild) when possible

    def host_path(self, path: str) -> Path | None: ...

    def own_tree(self, path: Path) -> None: ...

    async def run_argv(self, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None,
                       timeout: float | None = None, *, network: bool | None = None,
                       ) -> tuple[procs.RunOutput, bool]: ...


READ_ONLY_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/dev")


def _copy_into(src: Path, dst: Path) -> None:
    """Copies a file, or a directory's contents, to `dst` (symlinks copied as links, never followed)."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)


async def prepare_workdir(sb: BuildTarget) -> None:
    env_dir = sb.task.environment_dir
    work = sb.binds[sb.task.workdir]
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        if env_dir.is_dir():
            await asyncio.to_thread(_copy_into, env_dir, work)
            await asyncio.to_thread(sb.own_tree, work)
        return
    instructions = df.parse(dockerfile)
    cacheable = sb.build_cache and any(i.keyword == "RUN" for i in instructions)
    key = (
        f"v2-{archive.context_hash(env_dir)}-{sb.task.workdir.strip('/').replace('/', '_')}-net{int(sb.network)}"
    )
    if cacheable and await asyncio.to_thread(_restore, sb, key):
        return
    await _Build(sb, dockerfile).run(instructions)
    if cacheable:
        await asyncio.to_thread(_save, sb, key)


# Build cache: a Dockerfile's RUN lines (pip install...) would otherwise run again for every trial of
# a task. After a build, the writable dirs it produced are snapshotted; later trials copy them.
_NOT_CACHED = ("/tmp", "/var/tmp", "/logs/agent", "/logs/verifier")


def cache_root() -> Path:
    env = os.environ.get("LEGORL_BUILD_CACHE")
    return Path(env) if env else Path(tempfile.gettempdir()) / "legorl-build-cache"


def _save(sb: BuildTarget, key: str) -> None:
    final = cache_root() / key
    if final.exists() or sb.root is None:
        return
    tmp = cache_root() / f".{key}.{uuid.uuid4().hex[:8]}"
    dirs: dict[str, str] = {}
    for i, (dst, host) in enumerate(sorted(sb.binds.items())):
        if dst in _NOT_CACHED or sb.root not in host.parents:
            continue
        shutil.copytree(host, tmp / "dirs" / str(i), symlinks=True)
        dirs[dst] = str(i)
    meta = {"env": sb.env, "cwd": sb.cwd, "dirs": dirs, "service": sb.service}
    (tmp / "meta.json").write_text(json.dumps(meta))
    os.chmod(tmp, 0o700)
    try:
        tmp.rename(final)
    except OSError:  # another trial saved the same build first
        shutil.rmtree(tmp, ignore_errors=True)


def _restore(sb: BuildTarget, key: str) -> bool:
    src = cache_root() / key
    try:
        meta = json.loads((src / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    assert sb.root is not None
    for dst, sub in meta["dirs"].items():
        host = sb.binds.get(dst)
        if host is None:
            host = sb.root / "extra" / dst.strip("/").replace("/", "__")
            sb.binds[dst] = host
        shutil.copytree(src / "dirs" / sub, host, symlinks=True, dirs_exist_ok=True)
        sb.own_tree(host)
    sb.env.update(meta["env"])
    sb.cwd = meta["cwd"]
    sb.service = meta.get("service", {})
    return True


def clear_build_cache() -> None:
    shutil.rmtree(cache_root(), ignore_errors=True)


class _Build:
    def __init__(self, sb: BuildTarget, path: Path) -> None:
        self.sb, self.path = sb, path
        self.env_dir = path.parent.resolve()
        self.args: dict[str, str] = {}
        self.shell = ["/bin/sh", "-c"]
        self.service: dict[str, list[str]] = {}  # ENTRYPOINT / CMD argv (legorl.env.entrypoint starts them)
        self.cwd = sb.task.workdir
        self.deadline = time.monotonic() + sb.task.build_timeout_sec

    def _err(self, ins: df.Instruction, why: str) -> df.DockerfileError:
        return df.DockerfileError(self.path, ins.lineno, ins.raw, why)

    def _abs(self, p: str) -> str:
        return str(PurePosixPath(self.cwd) / p) if not p.startswith("/") else str(PurePosixPath(p))

    def _vars(self) -> dict[str, str]:
        return {**self.args, **self.sb.env}

    def ensure_dir(self, ins: df.Instruction, path: str) -> Path:
        """Host directory for a sandbox path; paths outside every writable bind get a new bind."""
        norm = os.path.normpath(path)
        if any(norm == s or norm.startswith(s + "/") for s in READ_ONLY_SYSTEM):
            raise self._err(ins, f"{norm} is in the read-only host system (the local backend has no image)")
        host = self.sb.host_path(norm)
        if host is None:
            assert self.sb.root is not None
            host = self.sb.root / "extra" / norm.strip("/").replace("/", "__")
            self.sb.binds[norm] = host
        host.mkdir(parents=True, exist_ok=True)
        self.sb.own_tree(host)
        return host

    async def run(self, instructions: list[df.Instruction]) -> None:
        for ins in instructions:
            kw = ins.keyword
            if kw == "WORKDIR":
                self.cwd = self._abs(df.substitute(ins.args, self._vars()))
                self.ensure_dir(ins, self.cwd)
            elif kw == "ENV":
                self.sb.env.update({k: v or "" for k, v in df.env_pairs(ins, self.path, self._vars())})
            elif kw == "ARG":
                for k, v in df.env_pairs(ins, self.path, self._vars()):
                    if v is not None:
                        self.args.setdefault(k, v)
            elif kw in ("ENTRYPOINT", "CMD"):
                self.service[kw.lower()] = df.command_form(ins, self.shell)
            elif kw == "VOLUME":
                for w in df.words(ins, self.path):
                    self.ensure_dir(ins, self._abs(df.substitute(w, self._vars())))
            elif kw == "SHELL":
                self.shell = df.shell_form(ins, self.path)
            elif kw in ("COPY", "ADD"):
                await asyncio.to_thread(self.copy, ins)
            elif kw == "RUN":
                await self.run_line(ins)
        self.sb.cwd = self.cwd
        self.sb.service = self.service

    def sources(self, ins: df.Instruction) -> tuple[list[Path], str]:
        """COPY/ADD's files in the build context (checked) and its destination, as written."""
        ws = [df.substitute(w, self._vars()) for w in df.words(ins, self.path)]
        if len(ws) < 2:
            raise self._err(ins, f"{ins.keyword} needs a source and a destination")
        srcs, dst = ws[:-1], ws[-1]
        files: list[Path] = []
        for s in srcs:
            matches = (
                sorted(glob.glob(str(self.env_dir / s)))
                if any(c in s for c in "*?[")
                else [str(self.env_dir / s)]
            )
            for m in matches:
                p = Path(os.path.normpath(m))
                if p != self.env_dir and self.env_dir not in p.parents:
                    raise self._err(ins, f"source {s} is outside the build context {self.env_dir}")
                if not p.exists():
                    raise self._err(ins, f"source {s} not found in {self.env_dir}")
                files.append(p)
        if not files:
            raise self._err(ins, "no source matched")
        return files, dst

    def copy(self, ins: df.Instruction) -> None:
        files, dst = self.sources(ins)
        target = self._abs(dst)
        into_dir = (
            dst.endswith("/")
            or len(files) > 1
            or (self.sb.host_path(target) or Path("/nonexistent")).is_dir()
        )
        for f in files:
            if f.is_dir():
                host = self.ensure_dir(ins, target)
                _copy_into(f, host)
            elif ins.keyword == "ADD" and tarfile.is_tarfile(f):
                host = self.ensure_dir(ins, target)
                with tarfile.open(f) as tar:
                    tar.extractall(host, filter="data")
            else:
                dest = f"{target}/{f.name}" if into_dir else target
                parent = self.ensure_dir(ins, str(PurePosixPath(dest).parent))
                host_file = parent / PurePosixPath(dest).name
                if not os.path.realpath(host_file).startswith(os.path.realpath(parent)):
                    raise self._err(ins, f"destination {dest} escapes its directory")
                _copy_into(f, host_file)
        for root in {self.sb.host_path(target)} - {None}:
            assert root is not None
            self.sb.own_tree(root if root.exists() else root.parent)

    async def run_line(self, ins: df.Instruction) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._err(ins, f"build timeout ({self.sb.task.build_timeout_sec:.0f}s) exceeded")
        cmd = df.run_command(ins)
        out, oom = await self.sb.run_argv(
            [*self.shell, cmd], cwd=self.cwd, env=self.args, timeout=left, network=self.sb.network
        )
        if out.exit_code != 0:
            why = "timed out" if out.timed_out else f"exit code {out.exit_code}"
            if oom:
                why += " (out of memory)"
            raise run_failed(self.path, ins, why, out)


def run_failed(path: Path, ins: df.Instruction, why: str, out: procs.RunOutput) -> SandboxError:
    """A failed RUN line: the file, line and command, then the last lines of its output."""
    text = (out.stdout + b"\n" + out.stderr).decode("utf-8", errors="replace").strip()
    return SandboxError(f"{path}:{ins.lineno}: RUN failed ({why}): {ins.raw.strip()[:300]!r}\n"
                        f"--- output (tail)\n{tail(text, 1500)}")
