"""A real Docker-API engine for the docker backend's tests: Podman's service on a private socket.

No Docker engine runs on the dev machines, but Debian's `podman` (with `runc`; crun refuses the
hybrid cgroup layout) serves the Docker API and runs containers from an image imported from a
tarball of host binaries: no registry, no network. Skipped with the reason when any piece is missing.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = "localhost/legorl-test-mini:1"
BINARIES = [
    "bash",
    "sh",
    "dash",
    "cat",
    "ls",
    "mkdir",
    "rm",
    "tar",
    "sleep",
    "env",
    "true",
    "false",
    "echo",
    "id",
    "touch",
    "test",
    "printf",
    "tr",
    "head",
    "tail",
    "cut",
    "sort",
    "sha256sum",
    "base64",
    "find",
    "readlink",
    "grep",
    "wc",
    "cp",
    "mv",
    "chmod",
    "ln",
    "dirname",
    "basename",
    "kill",
]
CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""


def _chain(path: str, seen: set[str]) -> list[str]:
    """`path` with its parent dirs resolved, plus every symlink hop to the real file."""
    out = []
    while path not in seen:
        seen.add(path)
        q = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        out.append(q)
        if not os.path.islink(q):
            break
        path = os.path.normpath(os.path.join(os.path.dirname(q), os.readlink(q)))
    return out


def _rootfs_tar(dest: Path) -> None:
    """A tiny image: the named host binaries and the libraries `ldd` says they need."""
    wanted: list[str] = []
    for b in BINARIES:
        path = shutil.which(b, path="/usr/bin:/bin")
        if not path:
            continue
        wanted.append(path)
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        wanted += [w for w in out.split() if w.startswith("/")]
    seen: set[str] = set()
    files = [q for p in wanted for q in _chain(p, seen)]
    with tarfile.open(dest, "w") as tar:
        for d, target in (
            ("bin", "usr/bin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
            ("sbin", "usr/sbin"),
        ):
            info = tarfile.TarInfo(d)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for d in ("tmp", "etc", "root", "proc", "dev", "sys"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for f in dict.fromkeys(files):
            tar.add(f, arcname=f.lstrip("/"), recursive=False)
        passwd = b"root:x:0:0:root:/root:/bin/bash\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))


def podman_service() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("docker backend tests need root to run podman's service")
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            pytest.skip(f"no Docker engine here and no `{tool}` to stand in (apt-get install podman runc)")
    work = Path("/tmp") / f"legorl-podman-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    (work / "containers.conf").write_text(CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(work / "containers.conf")}
    sock = work / "podman.sock"
    svc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(work / "service.log", "w"),  # noqa: SIM115
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.1)
        else:
            pytest.skip(f"podman service did not start: {(work / 'service.log').read_text()[-500:]}")
        have = subprocess.run(["podman", "image", "exists", IMAGE], env=env).returncode == 0
        if not have:
            _rootfs_tar(work / "rootfs.tar")
            r = subprocess.run(
                ["podman", "import", str(work / "rootfs.tar"), IMAGE], env=env, capture_output=True
            )
            if r.returncode != 0:
                pytest.skip(f"podman import failed: {r.stderr.decode()[-500:]}")
        yield f"unix://{sock}"
    finally:
        svc.terminate()
        try:
            svc.wait(10)
        except subprocess.TimeoutExpired:
            svc.kill()
        shutil.rmtree(work, ignore_errors=True)
