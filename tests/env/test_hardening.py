"""Host-side hardening (issue 21): trial files private, dead runs swept at start, disk use reported."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from legorl.env import local
from legorl.env.local import LocalSandbox
from legorl.tasks.model import TaskLimits

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


@pytest.mark.parametrize("dockerfile", [None, "FROM ubuntu:24.04\nWORKDIR /app\nCOPY a.txt .\nRUN echo b > b.txt\n"])
async def test_trial_files_are_private_on_the_host(make_task, sandbox_root: Path, dockerfile) -> None:
    files = {"a.txt": "a\n", **({"Dockerfile": dockerfile} if dockerfile else {})}
    async with LocalSandbox(make_task(files=files), root_dir=sandbox_root) as sb:
        assert (await sb.exec("echo s > /tmp/secret && echo t > secret && ls a.txt")).ok
        assert sb.root is not None
        for sub in ("work", "tmp", "home", "logs/agent", "logs/verifier", "logs/artifacts"):
            st = (sb.root / sub).stat()
            assert stat.S_IMODE(st.st_mode) == 0o700, (sub, oct(st.st_mode))
            if os.geteuid() == 0:
                assert st.st_uid == sb.uid, sub


async def test_start_sweeps_dead_runs_and_spares_live_ones(make_task, sandbox_root: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        sandbox_root.mkdir(parents=True)
        for name, pid in (("dead-run", dead.pid), ("live-run", live.pid)):
            (sandbox_root / name).mkdir()
            (sandbox_root / name / "owner").write_text(str(pid))
        local._SWEPT.discard(str(sandbox_root))
        async with LocalSandbox(make_task(), root_dir=sandbox_root):
            assert not (sandbox_root / "dead-run").exists()  # killed with -9 earlier: swept
            assert (sandbox_root / "live-run").exists()  # another run still going: untouched
    finally:
        live.kill()
        live.wait()
        for p in (sandbox_root / "live-run" / "owner", sandbox_root / "live-run"):
            p.unlink() if p.is_file() else p.rmdir()


async def test_disk_use_is_reported_against_the_storage_limit(make_task, sandbox_root: Path) -> None:
    task = make_task(limits=TaskLimits(memory_mb=512, storage_mb=8))
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        assert "not per trial" in (sb.storage_note() or "") and "EXCEEDED" not in (sb.storage_note() or "")
        # two 6 MB files: each under the per-file limit, together over the trial's 8 MB
        r = await sb.exec("head -c 6000000 /dev/urandom > a && head -c 6000000 /dev/urandom > /tmp/b")
        assert r.ok, r
        assert sb.usage_mb() >= 11
        assert "EXCEEDED: " in (sb.storage_note() or "")
