"""The local bubblewrap backend: Harbor paths, env, files, limits bookkeeping, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legorl.env import make_sandbox
from legorl.env.base import Sandbox, SandboxError
from legorl.env.local import LocalSandbox

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


async def test_harbor_layout_and_workdir_copy(make_task, sandbox_root: Path) -> None:
    task = make_task(files={"hello.txt": "hi\n", "src/a.py": "print(1)\n"})
    sb = make_sandbox(task, root_dir=sandbox_root)
    assert isinstance(sb, Sandbox)
    await sb.start()
    try:
        r = await sb.exec("pwd; cat hello.txt src/a.py; id -u; echo $HOME; touch new && echo wrote")
        assert r.ok, r
        lines = r.stdout.split()
        assert lines[0] == "/app" and lines[1] == "hi" and lines[4] != "0"
        assert "wrote" in r.stdout
        r = await sb.exec("touch /logs/agent/a /logs/verifier/v /tmp/t ~/h && ls /logs")
        assert r.ok and r.stdout.split() == ["agent", "artifacts", "verifier"], r
        r = await sb.exec("ls /tests; ls /solution")
        assert "No such file" in r.stderr
        # State persists across execs of one trial: /tmp and the workdir are host dirs.
        r = await sb.exec("ls /tmp/t new")
        assert r.ok, r
        # The task's own files are untouched by the trial.
        assert not (task.environment_dir / "new").exists()
    finally:
        await sb.stop()


async def test_env_cwd_and_clean_environment(make_task, sandbox_root: Path, monkeypatch) -> None:
    monkeypatch.setenv("LEGORL_SECRET_HOST_VAR", "leak")
    sb = LocalSandbox(make_task(files={"d/x": "1"}), root_dir=sandbox_root)
    async with sb:
        r = await sb.exec("pwd; echo $FOO; env", cwd="/app/d", env={"FOO": "bar"})
        assert r.stdout.splitlines()[:2] == ["/app/d", "bar"]
        assert "LEGORL_SECRET_HOST_VAR" not in r.stdout
        assert "PATH=/usr/local/sbin" in r.stdout


async def test_exit_code_and_stderr(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        r = await sb.exec("echo out; echo err >&2; exit 7")
        assert (r.exit_code, r.stdout, r.stderr, r.ok) == (7, "out\n", "err\n", False)


async def test_upload_download_roundtrip(make_task, sandbox_root: Path, tmp_path: Path) -> None:
    src = tmp_path / "payload"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("content")
    (tmp_path / "single.txt").write_text("one")
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        await sb.upload(src, "/app/data")
        await sb.upload(tmp_path / "single.txt", "/tmp/x/renamed.txt")
        r = await sb.exec("cat /app/data/sub/f.txt /tmp/x/renamed.txt; echo more > /app/data/sub/g.txt")
        assert r.stdout == "contentone", r
        await sb.download("/app/data", tmp_path / "back")
        await sb.download("/tmp/x/renamed.txt", tmp_path / "back.txt")
        assert (tmp_path / "back" / "sub" / "g.txt").read_text() == "more\n"
        assert (tmp_path / "back.txt").read_text() == "one"
        with pytest.raises(SandboxError, match="download"):
            await sb.download("/app/missing", tmp_path / "nope")
        with pytest.raises(SandboxError, match="upload"):
            await sb.upload(tmp_path / "single.txt", "/usr/evil.txt")


async def test_download_does_not_follow_agent_symlinks_to_host(
    make_task, sandbox_root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        await sb.exec(f"ln -s {secret} /app/link")
        # tar runs inside the sandbox (the link is archived as a link, never followed on the host)
        # and the host side refuses to recreate a link that points outside.
        with pytest.raises(SandboxError, match="refused"):
            await sb.download("/app/link", tmp_path / "got")
        assert not (tmp_path / "got").exists()


async def test_missing_bwrap_says_how_to_fix(make_task, sandbox_root: Path) -> None:
    sb = LocalSandbox(make_task(), bwrap="/nonexistent/bwrap", root_dir=sandbox_root)
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        await sb.start()


async def test_exec_before_start_and_unknown_backend(make_task) -> None:
    sb = LocalSandbox(make_task())
    with pytest.raises(SandboxError, match="not started"):
        await sb.exec("true")
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        make_sandbox(make_task(), backend="nope")


async def test_limits_are_reported(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        d = sb.describe()
        assert d["backend"] == "local" and d["network"] is False
        if os.geteuid() == 0 and Path("/sys/fs/cgroup/memory").is_dir():
            assert "memory" in d["cgroups"] and "pids" in d["cgroups"]
    async with LocalSandbox(make_task(), root_dir=sandbox_root, use_cgroups=False) as sb:
        assert "cgroups disabled" in sb.limits_note
        assert sb.rlimits.address_space_mb  # the memory backstop when no cgroup holds it
        r = await sb.exec("ulimit -v")
        assert r.stdout.strip() != "unlimited"


async def test_cleanup_stale_removes_orphans_only(make_task, sandbox_root: Path) -> None:
    from legorl.env.local import cleanup_stale

    async with LocalSandbox(make_task(), root_dir=sandbox_root) as live:
        orphan = sandbox_root / "orphan-xyz"
        orphan.mkdir()
        (orphan / "owner").write_text("999999999")  # no such pid
        assert cleanup_stale(sandbox_root) == 1
        assert not orphan.exists() and live.root is not None and live.root.exists()


async def test_bwrap_that_cannot_sandbox_says_why(make_task, sandbox_root: Path) -> None:
    fake = sandbox_root.parent / f"{sandbox_root.name}-fake-bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    try:
        sb = LocalSandbox(make_task(), bwrap=str(fake), root_dir=sandbox_root)
        with pytest.raises(SandboxError, match="user namespaces"):
            await sb.start()
        assert sb.root is None
    finally:
        fake.unlink()


async def test_health_check_for_preflight(sandbox_root: Path) -> None:
    from legorl.env.health import check_backend

    checks = await check_backend("local", root_dir=sandbox_root)
    assert checks[0][0] == "PASS", checks
    bad = await check_backend("local", bwrap="/nonexistent/bwrap", root_dir=sandbox_root)
    assert bad[0][0] == "FATAL" and "apt-get install bubblewrap" in bad[0][1]
    assert (await check_backend("nope"))[0][0] == "FATAL"
