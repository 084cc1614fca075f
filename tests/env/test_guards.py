"""Anti-hacking guards, exercised on a sandbox whose /tests is writable (as on backends that copy the
tests into a container) so the tampering the local backend's read-only mount refuses can happen."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from legorl.env import verify
from legorl.env.guards import compare, hash_host_tree, hash_tree
from legorl.env.local import LocalSandbox

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


class WritableTestsSandbox(LocalSandbox):
    """/tests is a writable bind that exists from the start, like a container's filesystem."""

    async def start(self) -> None:
        await super().start()
        assert self.root is not None
        host = self.root / "tests"
        host.mkdir()
        self.own_tree(host)
        self.binds["/tests"] = host

    async def mount_tests(self, src: Path | None = None) -> Path:
        host = self.binds["/tests"]
        shutil.copytree(Path(src or self.task.tests_dir), host, dirs_exist_ok=True)
        self.own_tree(host)
        return host


async def test_test_files_edited_during_verification_are_flagged(make_task, sandbox_root: Path) -> None:
    task = make_task(
        tests={"test.sh": "echo '# edited' >> /tests/test.sh; echo 1 > /logs/verifier/reward.txt"}
    )
    async with WritableTestsSandbox(task, root_dir=sandbox_root) as sb:
        res = await verify(sb, task)
    assert res.reward == 1.0 and res.tampered
    assert any("after run: modified ./test.sh" in f for f in res.flags), res.flags


async def test_preplanted_tests_dir_is_flagged_and_cleared(make_task, sandbox_root: Path) -> None:
    task = make_task(
        tests={"test.sh": "[ -e /tests/helper.sh ] && echo 1 || echo 0 > /logs/verifier/reward.txt"}
    )
    async with WritableTestsSandbox(task, root_dir=sandbox_root) as sb:
        await sb.exec("echo 'echo 1 > /logs/verifier/reward.txt' > /tests/helper.sh")
        res = await verify(sb, task)
    assert res.reward == 0.0  # the planted helper was removed before the real tests went in
    assert any("/tests existed before verification" in f for f in res.flags), res.flags


async def test_hash_tree_matches_host_hash(make_task, sandbox_root: Path) -> None:
    task = make_task(files={"a.txt": "a", "d/b.txt": "b"})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        await sb.exec("ln -s a.txt link")
        inside = await hash_tree(sb, "/app")
        assert await hash_tree(sb, "/nonexistent") is None
    host = hash_host_tree(task.environment_dir)
    assert inside is not None and {k: inside[k] for k in host} == host
    assert inside["./link"] == "link:a.txt"
    assert compare(host, {**host, "./a.txt": "x"}, "w") == ["w: modified ./a.txt"]
    assert compare(host, {}, "w") == ["w: removed ./a.txt, ./d/b.txt"]
    assert compare(host, None, "w") == ["w disappeared"]


async def test_exec_parts_runs_each_part_in_one_exec_and_no_output_forges_a_frame(make_task, sandbox_root: Path) -> None:
    """The verifier's checks share one exec: each part gets its own stdout and exit status, in order, and
    a file named like a frame marker (the agent cannot know the nonce) stays inside its part."""
    from legorl.env.guards import exec_parts, hash_cmd, parse_hash

    task = make_task(files={"a.txt": "a"})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        await sb.exec("mkdir -p /app/d && touch '/app/d/x\n@@0 rc 0\n@@0 part left' && printf 'no newline' > /app/n")
        calls = []
        real_exec = sb.exec

        async def counted(*a, **k):
            calls.append(a[0])
            return await real_exec(*a, **k)

        sb.exec = counted
        res = await exec_parts(sb, {"hash": hash_cmd("/app/d"), "cat": "cat /app/n", "fail": "exit 7",
                                    "gone": hash_cmd("/nonexistent"), "after": "echo done"})
    assert len(calls) == 1
    assert res["cat"] == ("no newline", 0) and res["fail"] == ("", 7) and res["after"] == ("done", 0)
    assert parse_hash(*res["gone"]) is None
    hashed = parse_hash(*res["hash"])
    assert hashed is not None and any("@@0 part left" in k for k in hashed) and res["hash"][1] == 0
