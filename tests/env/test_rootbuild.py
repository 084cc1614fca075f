"""Root builds over a copy-on-write host root: Docker-like RUN lines, the host never written, the
trial still unprivileged and read-only, failures that say which line and why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from legorl.env import rootfs
from legorl.env.base import SandboxError
from legorl.env.local import LocalSandbox
from legorl.env.localbuild import cache_root

pytestmark = [
    pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="root builds need root (non-root hosts use the unprivileged build)"),
]

MARK = f"legorl-rootbuild-test-{os.getpid()}"
DOCKERFILE = f"""\
FROM debian:bookworm-slim
RUN echo root-wrote-this > /usr/local/bin/{MARK} && echo x > /etc/{MARK} && useradd -m builder
RUN {{ id -u; ls -A /work 2>/dev/null | wc -l; ls -A /root | wc -l; cut -d: -f2 /etc/shadow | sort -u; }} \\
      > /opt/{MARK}.probe 2>&1; true
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN echo "$BASH_VERSION" | cut -c1 > /opt/{MARK}.shell
USER builder
RUN id -un > /tmp/who && cp /tmp/who /home/builder/who
USER root
WORKDIR /app
RUN cp /home/builder/who /app/built-by-user && cat /proc/sys/kernel/random/uuid > /app/stamp
"""


async def test_root_build_is_docker_like_and_host_untouched(make_task, sandbox_root: Path) -> None:
    if not rootfs.available(cache_root()):
        pytest.skip("overlayfs in a user namespace is not available on this kernel")
    task = make_task(files={"Dockerfile": DOCKERFILE})
    stamps = []
    for _ in range(2):
        async with LocalSandbox(task, root_dir=sandbox_root) as sb:
            assert sb.layer is not None
            probe = (await sb.exec(f"cat /opt/{MARK}.probe /opt/{MARK}.shell built-by-user")).stdout.split()
            # RUN ran as uid 0; /work and /root's files hidden; no password hash reached the layer
            assert probe[:3] == ["0", "0", "0"], probe  # uid 0; the host's /work and /root show empty
            assert all(h in ("*", "!", "!*", "x") for h in probe[3:-2]), probe
            assert probe[-2:] == ["5", "builder"], probe  # SHELL bash, USER builder
            r = await sb.exec(f"id -u; cat /usr/local/bin/{MARK}; id builder >/dev/null && echo user-ok; "
                              f"touch /usr/local/bin/{MARK} 2>&1; echo > /etc/{MARK} 2>&1; touch /app/mine && echo app-rw")
            lines = r.stdout.splitlines()
            assert lines[0] == str(sb.uid) != "0" and lines[1] == "root-wrote-this" and "user-ok" in lines
            assert "Read-only file system" in r.stdout and lines[-1] == "app-rw", r
            stamps.append((await sb.exec("cat stamp")).stdout)
    assert stamps[0] == stamps[1]  # the second trial reused the layer
    assert not Path(f"/usr/local/bin/{MARK}").exists() and not Path(f"/etc/{MARK}").exists()


async def test_failed_run_names_line_and_output_tail(make_task, sandbox_root: Path) -> None:
    if not rootfs.available(cache_root()):
        pytest.skip("overlayfs in a user namespace is not available on this kernel")
    df = "FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y legorl-no-such-package-xyz\n"
    sb = LocalSandbox(make_task(files={"Dockerfile": df}), root_dir=sandbox_root)
    with pytest.raises(SandboxError) as ei:
        await sb.start()
    msg = str(ei.value)
    assert "Dockerfile:3: RUN failed (exit code 100)" in msg and "Unable to locate package" in msg, msg


async def test_unmappable_from_is_refused_with_the_way_out(make_task, sandbox_root: Path) -> None:
    sb = LocalSandbox(make_task(files={"Dockerfile": "FROM alpine:3.20\nRUN apk add curl\n"}), root_dir=sandbox_root)
    with pytest.raises(SandboxError) as ei:
        await sb.start()
    assert "Dockerfile:1" in str(ei.value) and "backend='docker'" in str(ei.value)


async def test_many_trials_of_one_task_build_once(make_task, sandbox_root: Path) -> None:
    """More concurrent trials than the default thread pool has threads: one build, no deadlock."""
    import asyncio

    if not rootfs.available(cache_root()):
        pytest.skip("overlayfs in a user namespace is not available on this kernel")
    task = make_task(files={"Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nRUN sleep 1; cat /proc/sys/kernel/random/uuid > stamp\n"})
    boxes = [LocalSandbox(task, root_dir=sandbox_root) for _ in range(10)]
    try:
        await asyncio.wait_for(asyncio.gather(*(b.start() for b in boxes)), 120)
        stamps = {(await b.exec("cat stamp")).stdout for b in boxes}
        assert len(stamps) == 1 and stamps != {""}
    finally:
        await asyncio.gather(*(b.stop() for b in boxes))
