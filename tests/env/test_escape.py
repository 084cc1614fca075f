"""Escape attempts against the local sandbox: each is contained, ends with a clear outcome, and
leaves the host and a neighbouring trial unaffected."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from legorl.env.cgroups import layout
from legorl.env.local import LocalSandbox
from legorl.env.procs import Rlimits
from legorl.tasks.model import TaskLimits

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat counts a process's start in."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def uid_processes(uid: int, zombies: bool = True, started_before: int | None = None) -> list[int]:
    """Host pids running as `uid` (the sandbox's uid is its own; anything left is a leak).

    After `stop()` the uid is back in the pool, shared by every process on the host (the other xdist
    worker, a `legorl train` under test): `started_before` (boot_ticks) counts only processes older than
    that, so a later trial that took the uid is not a leak of this one."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                status = dict(
                    line.split(":", 1) for line in (d / "status").read_text().splitlines() if ":" in line
                )
                if int(status["Uid"].split()[0]) != uid or not (zombies or not status["State"].strip().startswith("Z")):
                    continue
                if started_before is not None:
                    start = int((d / "stat").read_text().rsplit(")", 1)[1].split()[19])
                    if start > started_before:
                        continue
                out.append(int(d.name))
            except (OSError, ValueError, KeyError, IndexError):
                pass
    return out


async def test_network_is_unreachable(make_task, sandbox_root: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
            r = await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED", timeout=10)
            assert r.exit_code != 0 and "CONNECTED" not in r.stdout, r
            r = await sb.exec("cat /sys/class/net/*/operstate 2>/dev/null; ls /sys/class/net 2>/dev/null")
            assert "eth" not in r.stdout
        with pytest.raises(BlockingIOError):
            srv.accept()  # nothing ever reached the host listener
        # The task's allow_internet switch is what opens it (checked on loopback only).
        task = make_task(limits=TaskLimits(allow_internet=True, memory_mb=512))
        async with LocalSandbox(task, root_dir=sandbox_root) as sb:
            r = await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED", timeout=10)
            assert "CONNECTED" in r.stdout, r
    finally:
        srv.close()


async def test_writes_outside_workdir_fail(make_task, sandbox_root: Path, tmp_path: Path) -> None:
    task = make_task(files={"f": "x"})
    host_probe = sandbox_root.parent / f"{sandbox_root.name}-probe"
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        for target in ("/usr/evil", "/etc/evil", "/evil", "/bin/evil", "/proc/sys/kernel/evil"):
            r = await sb.exec(f"echo x > {target}")
            assert r.exit_code != 0, (target, r)
        # Host paths do not exist inside; writing there lands in the trial's own dirs at most.
        for target in (host_probe, task.environment_dir / "f", tmp_path / "evil"):
            await sb.exec(f"mkdir -p {Path(target).parent} 2>/dev/null; echo pwned > {target}")
        r = await sb.exec("mount -o remount,rw /usr 2>&1; touch /usr/x")
        assert r.exit_code != 0
    assert not host_probe.exists()
    assert (task.environment_dir / "f").read_text() == "x"
    assert not (tmp_path / "evil").exists()
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()


async def test_cannot_read_another_trials_workdir(make_task, sandbox_root: Path) -> None:
    task = make_task()
    async with LocalSandbox(task, root_dir=sandbox_root) as a, LocalSandbox(task, root_dir=sandbox_root) as b:
        assert (await a.exec("echo TOPSECRET-A > /app/secret && echo s > /tmp/s")).ok
        other = a.binds["/app"]
        r = await b.exec(f"cat {other}/secret; cat /app/secret; ls {sandbox_root}; cat /tmp/s")
        assert "TOPSECRET-A" not in r.stdout and r.exit_code != 0
        r = await b.exec(
            "grep -rs TOPSECRET-A /app /tmp /home /logs /proc/*/cwd/ 2>/dev/null; true", timeout=20
        )
        assert "TOPSECRET-A" not in r.stdout
        assert a.uid != b.uid  # distinct uids: even a leaked path would be unreadable (0700 dirs)


async def test_fork_bomb_is_contained(make_task, sandbox_root: Path) -> None:
    task = make_task()
    async with (
        LocalSandbox(task, root_dir=sandbox_root, pids_max=64) as bomb,
        LocalSandbox(task, root_dir=sandbox_root) as neighbour,
    ):
        t0 = time.monotonic()
        run = asyncio.ensure_future(bomb.exec("bomb() { bomb | bomb & }; bomb; sleep 30", timeout=3))
        await asyncio.sleep(0.5)
        assert (await neighbour.exec("echo alive", timeout=10)).stdout == "alive\n"
        r = await run
        assert r.timed_out and r.exit_code == 124
        assert time.monotonic() - t0 < 20
        assert (await bomb.exec("echo still-usable", timeout=10)).stdout == "still-usable\n"
        uid = bomb.uid
        before = boot_ticks()
    left = uid_processes(uid, started_before=before)
    assert left == [], [(Path(f"/proc/{p}/stat").read_text()) for p in left]


async def test_memory_bomb_is_killed(make_task, sandbox_root: Path) -> None:
    task = make_task(limits=TaskLimits(memory_mb=128))
    bomb = "python3 -c 'a = []\nwhile True: a.append(bytearray(16 * 2**20))'"
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        r = await sb.exec(bomb, timeout=30)
        assert r.exit_code != 0 and not r.timed_out, r
        if "memory" in (sb.cgroup.dirs if sb.cgroup else {}):
            assert r.oom_killed and r.exit_code == 137 and "OOM" in r.stderr
        assert (await sb.exec("echo ok")).stdout == "ok\n"
    # Without a memory cgroup the RLIMIT_AS backstop stops it (MemoryError), not the host.
    light = Rlimits(address_space_mb=400)  # the default backstop is 1 GiB: keep the shared host light
    async with LocalSandbox(task, root_dir=sandbox_root, use_cgroups=False, rlimits=light) as sb:
        r = await sb.exec(bomb, timeout=30)
        assert r.exit_code != 0 and not r.timed_out
        assert "MemoryError" in r.stderr or r.exit_code == 137, r


async def test_infinite_loop_times_out(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        t0 = time.monotonic()
        r = await sb.exec("while :; do :; done", timeout=1)
        assert r.timed_out and r.exit_code == 124 and not r.ok
        assert time.monotonic() - t0 < 8
        assert (await sb.exec("echo next")).stdout == "next\n"


async def test_background_process_does_not_survive(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        uid = sb.uid
        t0 = time.monotonic()
        r = await sb.exec(
            "sleep 1000 & setsid nohup sleep 1001 >/dev/null 2>&1 & (sleep 1002 &); echo started"
        )
        assert r.stdout == "started\n" and time.monotonic() - t0 < 8, r
        # Leftovers live as long as the trial (a server the agent leaves for test.sh, as in Harbor's
        # container; legorl.env.persist), however they detach; quiesce() and stop() end them all.
        assert len(uid_processes(uid, zombies=False)) >= 3
        await sb.quiesce()
        assert uid_processes(uid) == []
        await sb.exec("nohup sleep 1003 >/dev/null 2>&1 &")
        assert uid_processes(uid, zombies=False)
        before = boot_ticks()
    assert uid_processes(uid, started_before=before) == []


async def test_huge_output_is_capped(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root, output_cap=1 << 20) as sb:
        r = await sb.exec("head -c 20000000 /dev/zero | tr '\\0' x; echo END", timeout=30)
        assert r.ok and r.truncated
        assert len(r.stdout) < (1 << 20) + 200
        assert "bytes of output truncated" in r.stdout and r.stdout.endswith("xEND\n")


async def test_concurrent_sandboxes_leave_nothing(make_task, sandbox_root: Path) -> None:
    task = make_task(files={"a.txt": "a"})
    boxes = [LocalSandbox(task, root_dir=sandbox_root) for _ in range(8)]
    await asyncio.gather(*(b.start() for b in boxes))
    uids = [b.uid for b in boxes]
    cgdirs = [d for b in boxes if b.cgroup for d in b.cgroup.dirs.values()]
    assert len(set(uids)) == 8
    results = await asyncio.gather(*(b.exec("cat a.txt; sleep 100 &") for b in boxes))
    assert all(r.stdout == "a" for r in results)
    before = boot_ticks()
    await asyncio.gather(*(b.stop() for b in boxes))
    assert list(sandbox_root.iterdir()) == []
    assert [uid_processes(u, started_before=before) for u in uids] == [[]] * 8
    assert not any(d.exists() for d in cgdirs)
    assert layout() is not None


async def test_unix_socket_route_to_host_without_network(make_task, sandbox_root: Path) -> None:
    """The one sanctioned way out: a host unix socket bound in (how an in-sandbox CLI reaches the proxy)."""
    sock_dir = Path("/tmp") / f"legorl-sock-{os.getpid()}"
    sock_dir.mkdir(mode=0o711, exist_ok=True)
    path = sock_dir / "proxy.sock"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong:" + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(handle, path=str(path))
    path.chmod(0o777)
    try:
        task = make_task()
        async with LocalSandbox(task, root_dir=sandbox_root, extra_ro_binds={"/run/legorl": sock_dir}) as sb:
            probe = (
                'python3 -c \'import socket; s = socket.socket(socket.AF_UNIX); s.connect("/run/legorl/proxy.sock");'
                ' s.sendall(b"ping\\n"); print(s.recv(100).decode())\''
            )
            r = await sb.exec(probe, timeout=20)
            assert r.stdout.strip() == "pong:ping", r
    finally:
        server.close()
        await server.wait_closed()
        path.unlink(missing_ok=True)
        sock_dir.rmdir()


def test_crashed_trainer_leaves_no_sandbox_running(make_task, sandbox_root: Path) -> None:
    """SIGKILL the process that owns a sandbox mid-exec: its sandboxed processes die with it."""
    import subprocess
    import sys

    task = make_task()
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from legorl.env.local import LocalSandbox\n"
        "from legorl.tasks.model import Task\n"
        "async def main():\n"
        f"    sb = LocalSandbox(Task(id='c', path=Path({str(task.path)!r}), instruction=''), root_dir={str(sandbox_root)!r})\n"
        "    await sb.start()\n"
        "    print(sb.uid, flush=True)\n"
        "    await sb.exec('sleep 1000 & sleep 1001', timeout=1000)\n"
        "asyncio.run(main())\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        uid = int(child.stdout.readline())
        deadline = time.monotonic() + 10
        while len(uid_processes(uid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert uid_processes(uid), "sandbox never started"
    finally:
        child.kill()
        child.wait()
    # bwrap's --die-with-parent also watches bwrap's own parent: the whole sandbox goes with it. What
    # remains are zombies reparented to the host's init (no resources; init reaps them).
    deadline = time.monotonic() + 5
    while uid_processes(uid, zombies=False) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(uid, zombies=False) == []
    from legorl.env.local import cleanup_stale

    assert cleanup_stale(sandbox_root) == 1  # the dead owner's trial dir is swept


async def test_cancelled_exec_kills_its_processes(make_task, sandbox_root: Path) -> None:
    """A worker that gives up on a command (asyncio cancellation) must not leave it running."""
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sb.exec("sleep 100 & sleep 101"), 0.5)
        deadline = time.monotonic() + 5
        while uid_processes(sb.uid, zombies=False) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert uid_processes(sb.uid, zombies=False) == []
        assert (await sb.exec("echo fine")).stdout == "fine\n"


async def test_no_nested_namespaces_or_privileges(make_task, sandbox_root: Path) -> None:
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        r = await sb.exec("unshare -r id -u")
        assert r.exit_code != 0, r  # nested user namespaces are disabled (bwrap --disable-userns)
        r = await sb.exec("grep CapEff /proc/self/status; id -u")
        cap, uid = r.stdout.split()[1], r.stdout.split()[2]
        assert int(cap, 16) == 0 and uid == str(sb.uid)


async def test_stop_without_proc_children_files_still_leaves_nothing(make_task, sandbox_root: Path,
                                                                   monkeypatch) -> None:
    """On a kernel without /proc/<pid>/task/*/children (CONFIG_PROC_CHILDREN off) stop() finds each exec's
    namespace init by scanning /proc for its parent and kills that, not bwrap: bwrap killed first orphans the
    init, which dies as a zombie of the host's pid 1, still under the uid that stop() hands back to the pool."""
    from legorl.env import procs

    monkeypatch.setattr(procs, "_children_from_task_files", lambda pid: None)
    sb = LocalSandbox(make_task(), root_dir=sandbox_root)
    await sb.start()
    uid = sb.uid
    await sb.exec("sleep 1004 &")
    assert uid_processes(uid, zombies=False)
    before = boot_ticks()
    t0 = time.monotonic()
    await sb.stop()
    left = uid_processes(uid, started_before=before)
    assert left == [], [Path(f"/proc/{p}/stat").read_text() for p in left]
    assert time.monotonic() - t0 < 5


def test_children_by_scan_finds_what_the_proc_files_list() -> None:
    import subprocess

    from legorl.env import procs

    kids = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        listed = procs._children_from_task_files(os.getpid())
        assert listed is not None and {k.pid for k in kids} <= set(listed)
        assert {k.pid for k in kids} <= set(procs._children_by_scan(os.getpid()))
    finally:
        for k in kids:
            k.kill()
            k.wait()


async def test_a_timed_out_exec_kills_its_namespace_even_if_the_first_kill_misses(make_task, sandbox_root: Path,
                                                                                  monkeypatch) -> None:
    """A timeout can fire before bwrap has started the namespace's init, so the first kill finds nothing (simulated
    here by dropping the first kill_namespace call). The run kills again until bwrap exits, and returns with nothing
    left under the uid. Killing bwrap after a fixed wait, as before, orphaned the init: a zombie of the host's pid
    1 under the trial's uid."""
    from legorl.env import procs

    real, calls = procs.kill_namespace, []

    def first_misses(pid: int) -> None:
        calls.append(pid)
        if len(calls) > 1:
            real(pid)

    monkeypatch.setattr(procs, "kill_namespace", first_misses)
    async with LocalSandbox(make_task(), root_dir=sandbox_root) as sb:
        t0 = time.monotonic()
        r = await sb.exec("sleep 1005", timeout=0.5)
        assert r.timed_out and r.exit_code == 124 and len(calls) >= 2
        left = uid_processes(sb.uid)
        assert left == [], [Path(f"/proc/{p}/stat").read_text() for p in left]
        assert time.monotonic() - t0 < 10
        assert (await sb.exec("echo usable", timeout=10)).stdout == "usable\n"
