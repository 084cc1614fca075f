"""The `local` backend: one bubblewrap sandbox per trial, no container engine needed.

Harbor tasks run unmodified because their paths exist: the task's workdir (a fresh writable copy of
environment/), /logs/agent and /logs/verifier, a private /tmp and home; /tests appears only for
verification and /solution only for the oracle. Everything else is the host's system, read-only.
State lives in per-trial host directories, so each `exec` is an independent bwrap call; processes an
exec leaves running live on until the trial ends, on one loopback per trial (`legorl.env.persist`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath

from legorl.env import archive, entrypoint, persist, procs, rootfs
from legorl.env.base import ExecResult, SandboxError, SandboxLifecycle
from legorl.env.bwrap import DEFAULT_BWRAP, SANDBOX_HOME, BwrapSpec, base_env, check_bwrap, passwd_files
from legorl.env.cgroups import TrialCgroup
from legorl.env.layerbuild import prepare
from legorl.env.localphase import LocalPhases
from legorl.env.output import DEFAULT_OUTPUT_CAP, tail
from legorl.env.trialdirs import UIDS, cleanup_stale, default_root
from legorl.tasks.model import Task

log = logging.getLogger(__name__)

DOWNLOAD_CAP = 1 << 30  # a download larger than this is refused rather than held in memory


_PROBED: set[str] = set()
_SWEPT: set[str] = set()  # sandbox roots whose dead runs' leftovers this process already removed


class LocalSandbox(LocalPhases, SandboxLifecycle):
    """Sandbox over bubblewrap. Options: bwrap path, root_dir, uid, pids_max, rlimits, output_cap,
    use_cgroups, build_cache, network (None = the task's allow_internet), extra_binds / extra_ro_binds."""

    def __init__(
        self,
        task: Task,
        *,
        bwrap: str = DEFAULT_BWRAP,
        root_dir: Path | str | None = None,
        uid: int | None = None,
        pids_max: int = 1024,
        rlimits: procs.Rlimits | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        use_cgroups: bool = True,
        build_cache: bool = True,
        root_builds: bool = True,
        network: bool | None = None,
        extra_binds: dict[str, Path | str] | None = None,
        extra_ro_binds: dict[str, Path | str] | None = None,
    ) -> None:
        self.task = task
        self.bwrap = bwrap
        self.root_dir = Path(root_dir) if root_dir else default_root()
        self._uid_opt = uid
        self.pids_max = pids_max
        self.output_cap = output_cap
        self.use_cgroups = use_cgroups
        self.build_cache = build_cache  # reuse a Dockerfile's RUN results across trials of a task
        self.root_builds = root_builds  # Dockerfile RUN as root over a copy-on-write root (legorl.env.rootfs)
        self.layer: Path | None = None  # the task's built image layer, mounted read-only per exec
        self.build: dict = {}  # the layer's meta: notes (FROM mapping), USER, build time
        self.network = task.limits.allow_internet if network is None else network
        # Host paths to show inside (sandbox path -> host path), e.g. the directory holding the proxy's
        # unix socket: path-based unix sockets work across network namespaces, TCP to the host does not.
        self._extra = {k: Path(v) for k, v in (extra_binds or {}).items()}
        self._extra_ro = {k: Path(v) for k, v in (extra_ro_binds or {}).items()}
        self.rlimits = rlimits or procs.Rlimits(
            file_size_mb=task.limits.storage_mb or 4096, nproc=max(pids_max, 64)
        )
        self.uid = self.gid = -1
        self.root: Path | None = None
        self.binds: dict[str, Path] = {}
        self.ro_binds: dict[str, Path] = {}
        self.env: dict[str, str] = dict(task.environment_env)  # + the Dockerfile's ENV lines
        self.cwd = task.workdir
        self._network_fixed = network is not None  # an explicit option wins over the task's phases
        self.phase = "agent"
        self._phase_env: dict[str, str] = dict(task.agent_env)  # [agent].env while the agent runs
        self.notes: list[str] = []  # what the task asked that this backend approximates
        self.cgroup: TrialCgroup | None = None
        self.limits_note = ""  # what isolation is missing on this host, empty when complete
        self._live: set[int] = set()
        self._net = persist.SharedNet()  # one loopback for all execs (root only): see legorl.env.persist
        self.service: dict[str, list[str]] = {}  # the Dockerfile's ENTRYPOINT / CMD, started by start()
        self._pooled_uid = False
        self._started = False

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self.bwrap = check_bwrap(self.bwrap)
        try:
            await asyncio.to_thread(self._setup_dirs)
            self._started = True
            await self._probe()
            if await self._net.start() is None:
                self.notes.append(f"no shared loopback between commands ({self._net.error}): a server one "
                                  "command starts is not reachable from the next")
            self.build = await prepare(self) or {}
            for host in self.binds.values():  # copies (copytree) carried the source's 0755 over
                if self.root is not None and self.root in host.parents:
                    host.chmod(0o700)
            if self.layer is not None or self.task.agent_user:
                await asyncio.to_thread(self._write_passwd)
            await entrypoint.start_service(self)
        except BaseException:
            await self.stop()
            raise

    async def _probe(self) -> None:
        """Once per process and bwrap path: a sandbox that cannot start fails here, with the fix."""
        if self.bwrap in _PROBED:
            return
        out, _ = await self.run_argv(["/bin/true"], cwd="/", timeout=30)
        if out.exit_code != 0:
            err = out.stderr.decode(errors="replace").strip()
            raise SandboxError(
                f"bubblewrap cannot create a sandbox on this host: {err or out.exit_code}. It needs unprivileged "
                "user namespaces (sysctl user.max_user_namespaces > 0; on Debian/Ubuntu also "
                "kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0)."
            )
        _PROBED.add(self.bwrap)

    def _setup_dirs(self) -> None:
        root_user = os.geteuid() == 0
        if self._uid_opt is not None:
            self.uid = self._uid_opt
        elif root_user:
            self.uid, self._pooled_uid = UIDS.take(), True
        else:
            self.uid = os.getuid()
        self.gid = self.uid if root_user else os.getgid()
        if root_user and self.uid == 0:
            raise SandboxError("refusing to run a sandbox as uid 0: pass a non-root uid")
        self.root_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root_dir, 0o711)
        if str(self.root_dir) not in _SWEPT:  # a run killed with -9 left trial dirs and cgroups behind
            _SWEPT.add(str(self.root_dir))
            n = cleanup_stale(self.root_dir)
            if n:
                log.info("removed %d trial dir(s) left by dead runs under %s", n, self.root_dir)
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", self.task.id)[:40]
        self.root = Path(tempfile.mkdtemp(prefix=f"{slug}-", dir=self.root_dir))
        os.chmod(self.root, 0o711)
        (self.root / "owner").write_text(str(os.getpid()))  # lets cleanup_stale() spot orphans
        layout = {
            self.task.workdir: "work",
            "/tmp": "tmp",
            "/var/tmp": "tmp",
            SANDBOX_HOME: "home",
            "/logs/agent": "logs/agent",
            "/logs/verifier": "logs/verifier",
            "/logs/artifacts": "logs/artifacts",
        }
        for dst, sub in layout.items():
            host = self.root / sub
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o700)  # only this trial's uid, even for host users who guess the path
            self._own(host)
            self.binds[dst] = host
        # 0700 everywhere: only the trial's uid (and root) can read a trial's files on the host
        (self.root / "etc").mkdir()
        self._write_passwd()
        self.binds.update(self._extra)
        self.ro_binds.update(self._extra_ro)
        self._setup_cgroup()

    def _write_passwd(self, name: str | None = None) -> None:
        """passwd/group naming the trial's uid (as the task's user, from the image's files if any)."""
        assert self.root is not None
        etc = self.layer / "upper" / "etc" if self.layer and (self.layer / "upper/etc/passwd").is_file() else None
        name = name or self.task.agent_user or "agent"
        name = "agent" if name in ("root", "0") else name  # the trial is never root: keep our own name
        passwd, group = passwd_files(self.uid, self.gid, etc or Path("/etc"), name)
        for f, text in (("passwd", passwd), ("group", group)):
            (self.root / "etc" / f).write_text(text)
            os.chmod(self.root / "etc" / f, 0o644)
            self.ro_binds[f"/etc/{f}"] = self.root / "etc" / f

    def _setup_cgroup(self) -> None:
        notes = []
        if self.use_cgroups:
            assert self.root is not None
            self.cgroup = TrialCgroup(
                f"legorl-{os.getpid()}-{uuid.uuid4().hex[:10]}"
            )  # owner pid: see cleanup_stale
            self.cgroup.create(self.task.limits.memory_mb, self.pids_max, self.task.limits.cpus)
            if self.cgroup.unavailable:
                notes.append(f"cgroup controllers unavailable: {', '.join(self.cgroup.unavailable)}")
            if self.cgroup.layout.reason:
                notes.append(self.cgroup.layout.reason)
        else:
            notes.append("cgroups disabled by option")
        no_memcg = self.cgroup is None or "memory" not in self.cgroup.dirs
        if no_memcg and self.rlimits.address_space_mb is None:
            # Without a memory cgroup the address-space rlimit is the only memory bound left.
            self.rlimits = dataclasses.replace(
                self.rlimits, address_space_mb=max(self.task.limits.memory_mb * 2, 1024)
            )
            notes.append(f"memory bounded by RLIMIT_AS={self.rlimits.address_space_mb}MB instead")
        self.limits_note = "; ".join(notes)

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def own_tree(self, path: Path) -> None:
        """Hands a copied tree to the sandbox uid (lchown: a symlink is never followed)."""
        if os.geteuid() != 0:
            return
        self._own(path)
        if path.is_dir() and not path.is_symlink():
            for dirpath, dirnames, filenames in os.walk(path):
                for n in dirnames + filenames:
                    os.chown(os.path.join(dirpath, n), self.uid, self.gid, follow_symlinks=False)

    async def stop(self) -> None:
        """Kills whatever the trial left running and removes every trace on the host. Idempotent."""
        await self._net.stop()
        await self.quiesce()  # returns once every exec is reaped: only then may the uid go back to the pool
        self._live.clear()
        if self.cgroup is not None:
            await asyncio.to_thread(self.cgroup.remove)
            self.cgroup = None
        if self.root is not None:
            root, self.root = self.root, None
            await asyncio.to_thread(shutil.rmtree, root, True)
        if self._pooled_uid:
            UIDS.give(self.uid)
            self._pooled_uid = False
        self._started = False


    # ---- running commands ------------------------------------------------------------------------

    def _spec(self, network: bool | None = None) -> BwrapSpec:
        spec = BwrapSpec(
            bwrap=self.bwrap,
            uid=self.uid,
            gid=self.gid,
            binds=dict(self.binds),
            ro_binds=dict(self.ro_binds),
            network=self.network if network is None else network,
        )
        if self.layer is not None and self.root is not None:
            spec.system_src = rootfs.system_sources(self.layer / "upper", self.root / "rootfs")
        return spec

    async def run_argv(
        self,
        argv: list[str],
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        stdin: bytes | AsyncIterator[bytes] | None = None,
        output_cap: int | None = None,
        network: bool | None = None,
    ) -> tuple[procs.RunOutput, bool]:
        """Runs argv inside the sandbox; returns the raw output and whether the OOM killer fired."""
        if not self._started or self.root is None:
            raise SandboxError("sandbox is not started")
        user = self.task.verifier_user if self.phase == "verifier" else self.task.agent_user
        named = {"USER": user, "LOGNAME": user} if user and user not in ("root", "0") else {}
        full_env = base_env({**named, **self.env, **self._phase_env, **(env or {})})
        net = self.network if network is None else network
        netns = self._net.path if not net and self._net.alive() else None  # the trial's own loopback
        bw = self._spec(net or netns is not None).argv(persist.init_argv(argv), cwd or self.cwd, full_env)
        drop = os.geteuid() == 0
        if self.layer is not None and self.root is not None:  # mount the layer, drop to the uid, bwrap
            bw = rootfs.trial_argv(self.layer / "upper", self.root / "rootfs", self.uid, self.gid) + bw
            drop = False
        spec = procs.SpawnSpec(
            argv=bw,
            cgroup_procs=self.cgroup.procs_files() if self.cgroup else [],
            rlimits=self.rlimits,
            uid=self.uid if drop else None,
            gid=self.gid if drop else None,
            netns=netns,
        )
        ooms = self.cgroup.oom_kills() if self.cgroup else 0
        out = await procs.run(
            spec,
            stdin=stdin,
            timeout=timeout,
            output_cap=self.output_cap if output_cap is None else output_cap,
            on_spawn=self._live.add,
            on_exit=self._live.discard,
            status_fd=True,
        )
        oom = bool(self.cgroup and self.cgroup.oom_kills() > ooms)
        return out, oom

    async def exec(
        self,
        cmd: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """`bash -c cmd` in a fresh namespace over the trial's dirs; timeout defaults to the agent's."""
        t = self.task.agent_timeout_sec if timeout is None else timeout
        out, oom = await self.run_argv(["/bin/bash", "-c", cmd], cwd, env, t)
        stderr = out.stderr.decode("utf-8", errors="replace")
        if oom:
            stderr += "\n[legorl: a process was killed by the OOM killer (memory limit)]\n"
        return ExecResult(
            exit_code=out.exit_code,
            stdout=out.stdout.decode("utf-8", errors="replace"),
            stderr=stderr,
            duration_s=out.duration_s,
            timed_out=out.timed_out,
            truncated=out.truncated,
            oom_killed=oom,
        )

    # ---- files -----------------------------------------------------------------------------------

    async def upload(self, src: Path, dst: str) -> None:
        """Copies a host file or directory to `dst` in the sandbox, as the sandbox user (tar over stdin,
        so a symlink the agent planted can never redirect a write onto the host)."""
        data = await asyncio.to_thread(archive.pack, Path(src), PurePosixPath(dst).name)
        parent = str(PurePosixPath(dst).parent)
        out, _ = await self.run_argv(
            ["/bin/sh", "-c", 'mkdir -p "$0" && tar -x --no-same-owner -C "$0" -f -', parent],
            cwd="/",
            stdin=data,
            timeout=300,
        )
        if out.exit_code != 0:
            raise SandboxError(f"upload {src} -> {dst} failed: {tail(out.stderr.decode(errors='replace'))}")

    async def download(self, src: str, dst: Path) -> None:
        """Copies `src` out of the sandbox to the host path `dst` (read inside, as the sandbox user)."""
        p = PurePosixPath(src)
        out, _ = await self.run_argv(
            ["/bin/sh", "-c", 'tar -c -C "$0" -f - -- "$1"', str(p.parent), p.name],
            cwd="/",
            timeout=300,
            output_cap=DOWNLOAD_CAP,
        )
        if out.exit_code != 0 or out.truncated:
            why = "too large" if out.truncated else tail(out.stderr.decode(errors="replace"))
            raise SandboxError(f"download {src} failed: {why}")
        try:
            await asyncio.to_thread(archive.unpack, out.stdout, p.name, Path(dst))
        except (tarfile.TarError, OSError) as e:
            raise SandboxError(f"download {src} refused: {e}") from e

    # ---- Harbor's verifier / oracle paths ----------------------------------------------------------

    def host_path(self, path: str) -> Path | None:
        """Host directory behind a writable sandbox path (longest bind prefix), None if read-only."""
        p = PurePosixPath(path)
        best = None
        for dst in self.binds:
            d = PurePosixPath(dst)
            if (p == d or d in p.parents) and (best is None or len(str(d)) > len(str(best))):
                best = d
        if best is None:
            return None
        return self.binds[str(best)] / p.relative_to(best)

    async def _mount_copy(self, src: Path, name: str, at: str) -> Path:
        assert self.root is not None
        host = self.root / name
        if host.exists():
            await asyncio.to_thread(shutil.rmtree, host)
        await asyncio.to_thread(shutil.copytree, src, host, symlinks=True)
        # Readable by the sandbox uid, writable by nobody inside: the bind is read-only too.
        await asyncio.to_thread(self.own_tree, host)
        host.chmod(0o700)
        self.ro_binds[at] = host
        return host

    async def mount_tests(self, src: Path | None = None) -> Path:
        """Makes the task's tests visible at /tests (read-only) from the next exec on."""
        return await self._mount_copy(Path(src or self.task.tests_dir), "tests", "/tests")

    async def mount_solution(self, src: Path | None = None) -> Path:
        """Makes the reference solution visible at /solution (read-only): the oracle only."""
        return await self._mount_copy(Path(src or self.task.solution_dir), "solution", "/solution")

    async def unmount(self, at: str) -> None:
        host = self.ro_binds.pop(at, None)
        if host is not None:
            await asyncio.to_thread(shutil.rmtree, host, True)

    @property
    def logs_dir(self) -> Path | None:
        return self.binds.get("/logs/verifier")

    def usage_mb(self) -> float:
        """Disk the trial's files take on the host (the local backend's storage limit is per file
        only, RLIMIT_FSIZE: this is how a trial's total is reported instead)."""
        total = 0
        for dirpath, _dirs, files in os.walk(self.root or "/nonexistent"):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
                except OSError:
                    pass
        return round(total / 2**20, 1)

    def storage_note(self) -> str | None:
        """What the outcome should say about the task's storage limit on this backend."""
        limit = self.task.limits.storage_mb
        if limit is None or self.root is None:
            return None
        used = self.usage_mb()
        over = f"; EXCEEDED: {used} MB on disk" if used > limit else ""
        return (f"storage_mb={limit} enforced per file (RLIMIT_FSIZE), not per trial: the local backend has "
                f"no per-trial disk quota{over}")

    def describe(self) -> dict[str, object]:
        """What isolation this sandbox has, for logs and preflight."""
        return {
            "backend": "local",
            "uid": self.uid,
            "network": self.network,
            "cgroups": sorted(self.cgroup.dirs) if self.cgroup else [],
            "missing": self.limits_note,
            "notes": list(self.notes) + list(self.build.get("notes", [])),
            "root": str(self.root) if self.root else None,
        }


__all__ = ["LocalSandbox", "cleanup_stale"]
