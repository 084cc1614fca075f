"""The compiled trial helper (env/overlay_exec.c) does what the Python one does: a layered trial's exec sees its
layer read-only, writes /app, runs unprivileged; failures exit 125 with one "legorl overlay:" line; without a
compiler the Python helper runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from legorl.env import overlay_exec, rootfs
from legorl.env.local import LocalSandbox
from legorl.env.localbuild import cache_root

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="layers and mount namespaces need root here "
                                "(non-root hosts use the unprivileged build)")
DOCKERFILE = "FROM ubuntu:24.04\nWORKDIR /app\nCOPY hello.txt /usr/local/share/legorl-ovl-hello.txt\n"
PROBE = ("id -u; cat /usr/local/share/legorl-ovl-hello.txt; touch /usr/local/share/x 2>&1 | grep -c 'Read-only'; "
         "touch /app/mine && echo app-rw; cat /proc/self/status | grep -c '^Groups:\\s*$'")


@needs_root
@pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")
@pytest.mark.parametrize("helper", ["compiled", "python"])
async def test_a_layered_trial_runs_the_same_under_either_helper(helper, make_task, sandbox_root: Path,
                                                                  monkeypatch) -> None:
    if not rootfs.available(cache_root()):
        pytest.skip("overlayfs in a user namespace is not available on this kernel")
    if helper == "python":
        monkeypatch.setattr(overlay_exec, "trial_helper", overlay_exec.python_helper)
    else:
        overlay_exec.build()  # a compiler is there wherever layers are (the kernels need one too)
    task = make_task(files={"Dockerfile": DOCKERFILE, "hello.txt": "from the layer\n"})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        assert sb.layer is not None
        argv0 = rootfs.trial_argv(sb.layer / "upper", sb.root / "rootfs", sb.uid, sb.gid)[0]
        assert (Path(argv0).name.startswith("legorl-overlay-")) == (helper == "compiled"), argv0
        r = await sb.exec(PROBE)
    assert r.exit_code == 0, r
    assert r.stdout.splitlines() == [str(sb.uid), "from the layer", "1", "app-rw", "1"], r.stdout


@needs_root
def test_the_compiled_helper_fails_as_the_python_one_does(tmp_path: Path) -> None:
    def run(helper: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*helper, *args], capture_output=True, text=True, timeout=30)

    compiled = (str(overlay_exec.build()),)
    missing = tmp_path / "missing"
    bad_mount = ("--ro", f"{missing}=/usr", "--uid", "0", "--gid", "0", "--", "/bin/true")
    got, want = run(compiled, *bad_mount), run(overlay_exec.python_helper(), *bad_mount)
    assert got.returncode == want.returncode == 125
    assert got.stderr == want.stderr == f"legorl overlay: mount overlay on {missing}: No such file or directory\n"
    for args in (("--uid", "x", "--gid", "0", "--", "/bin/true"), ("--uid", "0", "--gid", "0")):
        r = run(compiled, *args)
        assert r.returncode == 125 and r.stderr.startswith("legorl overlay: ") and r.stderr.count("\n") == 1, r
    assert run(compiled, "--uid", "0", "--gid", "0", "--", "/bin/sh", "-c", "exit 3").returncode == 3


def test_without_a_compiler_the_python_helper_runs(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    overlay_exec.trial_helper.cache_clear()
    try:
        assert overlay_exec.trial_helper() == overlay_exec.python_helper()
    finally:
        overlay_exec.trial_helper.cache_clear()
    assert not (tmp_path / "bin").exists() or not any((tmp_path / "bin").iterdir())


@needs_root
def test_preflight_says_which_helper_layered_trials_get(monkeypatch) -> None:
    from legorl.env.health import trial_helper_checks

    overlay_exec.build()
    assert [level for level, _ in trial_helper_checks()] == ["PASS"]
    monkeypatch.setattr(overlay_exec, "trial_helper", overlay_exec.python_helper)
    (level, message), = trial_helper_checks()
    assert level == "WARN" and "install a C compiler" in message
