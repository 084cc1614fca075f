"""The docker backend against a real Docker-API engine (Podman here; see podman_fixture), plus the
request it builds. Podman ignores some HostConfig fields under cgroup v1 without systemd; the limits
themselves are the engine's job and are checked only as request fields."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from legorl.env import make_sandbox, run_oracle, verify
from legorl.env.base import SandboxError
from legorl.env.docker import DockerSandbox, cleanup, container_config
from legorl.env.guards import can_see_tests
from legorl.tasks.model import TaskLimits

from .podman_fixture import IMAGE, podman_service

pytest.importorskip("aiodocker")


@pytest.fixture(scope="module")
def docker_url() -> Iterator[str]:
    yield from podman_service()


def test_container_request() -> None:
    from legorl.tasks.model import Task

    t = Task(id="x", path=Path("/nope"), instruction="", limits=TaskLimits(cpus=2, memory_mb=256))
    cfg = container_config(t, "img:1", "trial1", network=False, pids_limit=99)
    assert cfg["Image"] == "img:1" and cfg["WorkingDir"] == "/app" and cfg["NetworkDisabled"]
    hc = cfg["HostConfig"]
    assert hc["NetworkMode"] == "none" and hc["Memory"] == hc["MemorySwap"] == 256 * 2**20
    assert hc["NanoCpus"] == 2_000_000_000 and hc["PidsLimit"] == 99
    assert cfg["Labels"]["legorl.sandbox"] == "1" and cfg["Labels"]["legorl.trial"] == "trial1"


async def test_unreachable_engine_is_a_clear_error(make_task) -> None:
    sb = DockerSandbox(make_task(), url="unix:///nonexistent/docker.sock", image=IMAGE)
    with pytest.raises(SandboxError, match="cannot reach the Docker API"):
        await sb.start()


async def test_exec_files_timeout_and_isolation(docker_url: str, make_task, tmp_path: Path) -> None:
    task = make_task(files={"hello.txt": "hi\n"})
    sb = make_sandbox(task, backend="docker", url=docker_url, image=IMAGE)
    await sb.start()
    try:
        r = await sb.exec("pwd; cat hello.txt; echo $FOO; echo e >&2; exit 4", env={"FOO": "bar"})
        assert (r.exit_code, r.stdout, r.stderr) == (4, "/app\nhi\nbar\n", "e\n"), r
        r = await sb.exec("grep -c : /proc/net/dev")
        assert r.stdout.strip() == "1"  # loopback only: no network
        r = await sb.exec("sleep 30; echo never", timeout=1)
        assert r.timed_out and r.exit_code == 124 and "never" not in r.stdout
        r = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert "sleep 30" not in r.stdout  # the timed-out tree was killed
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "f.txt").write_text("up")
        await sb.upload(tmp_path / "d", "/app/up")
        await sb.exec("echo back >> /app/up/f.txt")
        await sb.download("/app/up", tmp_path / "back")
        assert (tmp_path / "back" / "f.txt").read_text() == "upback\n"
        r = await sb.exec("head -c 3000000 /dev/zero | tr '\\0' x")
        assert r.truncated and len(r.stdout) < 1_100_000
    finally:
        await sb.stop()


async def test_verifier_and_oracle_in_container(docker_url: str, make_task) -> None:
    check = '[ "$(cat /app/g.txt 2>/dev/null)" = hello ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt'
    task = make_task(tests={"test.sh": check}, solution={"solve.sh": "echo hello > g.txt"})
    sb = DockerSandbox(task, url=docker_url, image=IMAGE)
    await sb.start()
    try:
        assert not await can_see_tests(sb)
        # A process the agent leaves behind would outlive its exec here: quiesce kills it first.
        await sb.exec("(sleep 1000; echo 1 > /logs/verifier/reward.txt) >/dev/null 2>&1 &")
        res = await verify(sb, task)
        assert (res.outcome, res.reward, res.flags) == ("ok", 0.0, []), res
        assert not await can_see_tests(sb)  # hidden again after verification
    finally:
        await sb.stop()
    async with DockerSandbox(task, url=docker_url, image=IMAGE) as sb:
        assert (await run_oracle(sb, task)).ok
        res = await verify(sb, task)
        assert (res.outcome, res.reward, res.flags) == ("ok", 1.0, []), res


async def test_cleanup_by_label(docker_url: str, make_task) -> None:
    sb = DockerSandbox(make_task(), url=docker_url, image=IMAGE)
    await sb.start()
    sb.container = None  # simulate a crashed run that never called stop()
    await sb.stop()
    assert await cleanup(docker_url) >= 1
    assert await cleanup(docker_url) == 0


async def test_image_built_from_dockerfile(docker_url: str, make_task) -> None:
    dockerfile = f"FROM {IMAGE}\nWORKDIR /app\nCOPY a.txt .\nRUN echo built > b.txt\nENV MODE=x\n"
    task = make_task(files={"Dockerfile": dockerfile, "a.txt": "a\n"})
    async with DockerSandbox(task, url=docker_url) as sb:
        r = await sb.exec("cat a.txt b.txt; echo $MODE")
        assert r.stdout == "a\nbuilt\nx\n", r


async def test_quiesce_spares_the_images_services(docker_url: str, make_task) -> None:
    """Processes up when the agent's phase begins (the image's ENTRYPOINT services) survive quiesce, for
    test.sh to query; what the agent left behind does not."""
    from legorl.env.phases import enter_phase

    async with DockerSandbox(make_task(), url=docker_url, image=IMAGE) as sb:
        await sb.exec("(sleep 1001; true) >/dev/null 2>&1 &")  # stands for a service the entrypoint started
        await enter_phase(sb, "agent")
        await sb.exec("(sleep 1002; true) >/dev/null 2>&1 &")  # the agent's leftover
        await sb.quiesce()
        r = await sb.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        assert "sleep 1001" in r.stdout and "sleep 1002" not in r.stdout, r


def test_legorl_eval_over_the_docker_backend(docker_url: str, tmp_path: Path) -> None:
    """`legorl eval TASK --backend docker` (the engine found by $DOCKER_HOST, as a user points it): the oracle
    scores 1 and the no-op 0 in containers of the task's `docker_image`."""
    import json
    import os
    import subprocess
    import sys

    task = tmp_path / "greet"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(f'[environment]\ndocker_image = "{IMAGE}"\nworkdir = "/app"\n'
                                    "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 60.0\n")
    (task / "instruction.md").write_text("Write hello to /app/g.txt.\n")
    (task / "tests" / "test.sh").write_text(
        '[ "$(cat /app/g.txt 2>/dev/null)" = hello ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n')
    (task / "solution" / "solve.sh").write_text("echo hello > /app/g.txt\n")
    env = dict(os.environ, DOCKER_HOST=docker_url)
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / agent
        res = subprocess.run([sys.executable, "-m", "legorl.cli", "eval", str(task), "-a", agent, "--backend", "docker",
                              "-o", str(out)], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        (trial,) = json.loads((out / "results.json").read_text())["trials"]
        assert trial["reward"] == reward and trial["outcome"] == ("solved" if reward else "failed"), trial
