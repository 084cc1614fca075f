"""Image layers without Docker: a Dockerfile's RUN lines run as root over a copy-on-write host root.

When legorl runs as root on a kernel with overlayfs, a task's Dockerfile builds like Docker's: each
RUN line runs as uid 0 inside a user namespace (capabilities over that namespace only), over an
overlay whose lowest layer is the host root and whose writes land in the layer's `upper/` dir, with
the host network (apt and pip reach their registries). The layer is cached under the hash of the
Dockerfile and its context; trials mount it read-only (overlay of layer + host root) and stay the
unprivileged, read-only sandboxes they always were. The host root is never written.

Before the first RUN the layer hides what is private on the host: top-level entries outside a Linux
image's standard set are emptied (files whited out, dirs opaque), /root /home /tmp /run /mnt /srv /media /var/tmp start empty, and
/etc/shadow and /etc/gshadow are copies without password hashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from legorl.env import overlay_exec, procs

_STANDARD = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin", "sys",
             "usr", "var", "lost+found"}
_EMPTY = ("root", "home", "tmp", "run", "mnt", "srv", "media", "var/tmp")
# What a trial sees of a layer, read-only (the host's other top-level dirs stay out, as before).
LAYER_SYSTEM = ("/usr", "/etc", "/var", "/opt")
BUILD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_AVAILABLE: dict[str, bool] = {}


def helper_argv(merged: Path, *, upper: Path | None = None, work: Path | None = None) -> list[str]:
    """The prefix that mounts a build's overlay at `merged` and runs the command after it as root
    in a user namespace."""
    return [*overlay_exec.python_helper(), "--merged", str(merged), "--upper", str(upper), "--work", str(work),
            "--build", "--"]


def trial_argv(layer_upper: Path, mounts: Path, uid: int, gid: int) -> list[str]:
    """The prefix that mounts a layer's system dirs read-only under `mounts` (each over the host's
    own dir), then drops to uid/gid and runs the command after it (the compiled helper where it builds:
    env/overlay_exec.py)."""
    a = list(overlay_exec.trial_helper())
    for d in LAYER_SYSTEM:
        name = d.strip("/")
        if (layer_upper / name).is_dir() and Path(d).is_dir():
            a += ["--ro", f"{mounts / name}={layer_upper / name}:{d}"]
    return [*a, "--uid", str(uid), "--gid", str(gid), "--"]


def system_sources(layer_upper: Path, mounts: Path) -> dict[str, Path]:
    """Where each system dir of a layered trial comes from: its overlay (mount point created here),
    or the host dir as is."""
    out = {}
    for d in LAYER_SYSTEM:
        name = d.strip("/")
        if (layer_upper / name).is_dir() and Path(d).is_dir():
            out[d] = mounts / name
            out[d].mkdir(mode=0o755, parents=True, exist_ok=True)
        elif (layer_upper / name).is_dir():
            out[d] = layer_upper / name
        elif Path(d).is_dir():
            out[d] = Path(d)
    return out


def available(scratch: Path) -> bool:
    """Root, overlayfs and user namespaces all work here (probed once per process)."""
    key = str(scratch)
    if key not in _AVAILABLE:
        ok = os.geteuid() == 0 and Path("/usr/bin/bwrap").exists()
        if ok:
            d = scratch / f".probe-{os.getpid()}"
            try:
                for sub in ("upper", "work", "merged"):
                    (d / sub).mkdir(parents=True, exist_ok=True)
                argv = [*helper_argv(d / "merged", upper=d / "upper", work=d / "work"), "/bin/true"]
                ok = subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
            finally:
                shutil.rmtree(d, ignore_errors=True)
        _AVAILABLE[key] = ok
    return _AVAILABLE[key]


def _whiteout(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR, os.makedev(0, 0))


def _opaque(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def _no_hashes(src: Path, dst: Path) -> None:
    try:
        lines = src.read_text().splitlines()
    except OSError:
        return
    out = []
    for line in lines:
        parts = line.split(":")
        if len(parts) > 1:
            parts[1] = "*" if parts[1] not in ("", "!", "*", "!*") else parts[1]
        out.append(":".join(parts))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(x + "\n" for x in out))
    os.chmod(dst, 0o640)
    with contextlib.suppress(KeyError, OSError):
        import grp

        os.chown(dst, 0, grp.getgrnam("shadow").gr_gid)


def seed_upper(upper: Path) -> None:
    """Hides the host's private files from a build before anything runs in it."""
    for entry in os.listdir("/"):
        if entry not in _STANDARD and entry not in _EMPTY:
            # a dir stays as an empty (opaque) dir, so a build may still use its name (WORKDIR /work)
            path = Path("/") / entry
            (_opaque if path.is_dir() and not path.is_symlink() else _whiteout)(upper / entry)
    for d in _EMPTY:
        _opaque(upper / d)
    os.chmod(upper / "tmp", 0o1777)
    os.chmod(upper / "var" / "tmp", 0o1777)
    os.chmod(upper / "root", 0o700)
    for name in ("shadow", "gshadow"):
        _no_hashes(Path("/etc") / name, upper / "etc" / name)


def build_argv(merged: Path, cwd: str, env: dict[str, str], cmd: list[str]) -> list[str]:
    """bubblewrap inside the build's user namespace: the merged layer is /, the host's DNS config."""
    a = ["/usr/bin/bwrap", "--bind", str(merged), "/", "--proc", "/proc", "--dev", "/dev",
         "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
         "--die-with-parent", "--new-session"]
    for f in ("/etc/resolv.conf", "/etc/hosts"):
        if Path(f).is_file():
            a += ["--ro-bind", f, f]
    a += ["--chdir", cwd, "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    return [*a, "--", *cmd]


async def run_in_layer(layer: Path, cmd: list[str], cwd: str, env: dict[str, str], timeout: float,
                       cgroup_procs: list[Path]) -> procs.RunOutput:
    """One RUN line as root in the layer under construction (layer/upper, layer/work)."""
    merged = layer / "merged"
    argv = helper_argv(merged, upper=layer / "upper", work=layer / "work")
    full_env = {"PATH": BUILD_PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
                "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore", **env}
    spec = procs.SpawnSpec(argv=argv + build_argv(merged, cwd, full_env, cmd), cgroup_procs=cgroup_procs,
                           rlimits=procs.Rlimits(file_size_mb=None, nproc=None))
    return await procs.run(spec, timeout=timeout, output_cap=1 << 20)


def copy_out(layer_upper: Path, path: str, dst: Path) -> None:
    """A layer's directory (e.g. the workdir) copied to a trial's writable dir, whiteouts skipped."""
    src = layer_upper / path.strip("/")
    if not src.is_dir():
        return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: [n for n in names if _is_whiteout(Path(d) / n)])


def _is_whiteout(p: Path) -> bool:
    with contextlib.suppress(OSError):
        st = p.lstat()
        return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    return False


async def remove(path: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, path, True)
