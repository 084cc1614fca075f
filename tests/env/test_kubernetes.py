"""The kubernetes backend through kubernetes_asyncio against a fake API server (tests/env/fake_kube.py:
real HTTP and exec websocket on 127.0.0.1, pods backed by local sandboxes). No cluster runs here, so
scheduling, image pulls and NetworkPolicy enforcement are the cluster's and are checked as requests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from legorl.env import make_sandbox, verify
from legorl.env.base import SandboxError
from legorl.env.kubernetes import KubernetesSandbox, cleanup, pod_manifest
from legorl.tasks.model import Task, TaskLimits

from .fake_kube import FakeKube

pytest.importorskip("kubernetes_asyncio")
pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


@pytest.fixture
async def kube(sandbox_root: Path, tmp_path: Path) -> AsyncIterator[FakeKube]:
    (tmp_path / "podtask" / "environment").mkdir(parents=True)
    fake = FakeKube(sandbox_root, tmp_path / "podtask")
    await fake.start()
    yield fake
    await fake.close()


def test_pod_manifest() -> None:
    t = Task(
        id="x", path=Path("/nope"), instruction="", limits=TaskLimits(cpus=0.5, memory_mb=300, storage_mb=900)
    )
    m = pod_manifest(t, "legorl-abc", "img:1", "abc", {"team": "rl"})
    c = m["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "0.5", "memory": "300Mi", "ephemeral-storage": "900Mi"}
    assert c["command"] == ["sleep", "infinity"] and c["workingDir"] == "/app"
    assert m["spec"]["automountServiceAccountToken"] is False
    assert m["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "legorl",
        "legorl/trial": "abc",
        "team": "rl",
    }


async def test_needs_an_image(make_task) -> None:
    with pytest.raises(SandboxError, match="needs an image"):
        await KubernetesSandbox(make_task()).start()


async def test_pod_lifecycle_exec_files_and_verify(kube: FakeKube, make_task, tmp_path: Path) -> None:
    task = make_task(
        files={"hello.txt": "hi\n"},
        tests={
            "test.sh": "cat /app/hello.txt > /logs/verifier/reward.txt; echo 1 > /logs/verifier/reward.txt"
        },
    )
    sb = make_sandbox(task, backend="kubernetes", host=kube.url, image="img:1", namespace="rl")
    assert isinstance(sb, KubernetesSandbox)
    await sb.start()
    try:
        assert [k for k, _ in kube.log[:2]] == ["create_policy", "create_pod"]  # no network by default
        r = await sb.exec("pwd; cat hello.txt; echo $FOO; echo err >&2; exit 5", env={"FOO": "a b$c"})
        assert (r.exit_code, r.stdout, r.stderr) == (5, "/app\nhi\na b$c\n", "err\n"), r
        r = await sb.exec("sleep 30", timeout=1)
        assert r.timed_out and r.exit_code == 124
        (tmp_path / "up.txt").write_text("x" * 300_000)  # several base64 chunks
        await sb.upload(tmp_path / "up.txt", "/app/dir/up.txt")
        await sb.download("/app/dir", tmp_path / "back")
        assert (tmp_path / "back" / "up.txt").read_text() == "x" * 300_000
        res = await verify(sb, task)
        assert (res.outcome, res.reward) == ("ok", 1.0), res
    finally:
        await sb.stop()
    assert kube.pods == {} and kube.policies == {}


async def test_cleanup_by_label(kube: FakeKube, make_task) -> None:
    sb = KubernetesSandbox(make_task(), host=kube.url, image="img:1")
    await sb.start()
    sb.pod_created = sb.policy_created = False  # a crashed run: stop() forgets its pod
    await sb.stop()
    assert len(kube.pods) == 1
    await cleanup("default", host=kube.url)
    assert kube.pods == {} and kube.policies == {}
    assert ("delete_pods", "app.kubernetes.io/managed-by=legorl") in kube.log
