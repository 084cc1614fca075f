"""Worker fixtures: the tiny model behind a real proxy, shell-basics tasks, leak checks."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.manager import SingleReplicaManager
from legorl.tasks import load_tasks

from .scripted import ReplayEngine


@pytest.fixture(scope="session")
def shell_tasks():
    return {t.id: t for t in load_tasks("builtin:shell-basics")}


@pytest.fixture
async def proxy(engine, tokenizer):
    server = ProxyServer(SingleReplicaManager(engine, engine.max_model_len), tokenizer, ProxyConfig())
    await server.start()
    yield server
    await server.close()


async def replay_proxy(tokenizer, script: list[str]) -> tuple[ProxyServer, ReplayEngine]:
    eng = ReplayEngine(tokenizer, script, eos_id=tokenizer.eos_token_id)
    server = ProxyServer(SingleReplicaManager(eng, 2048), tokenizer, ProxyConfig())
    await server.start()
    return server, eng


def child_processes() -> list[str]:
    """Command lines of every live descendant of this process (a finished trial must leave none)."""
    parents: dict[int, int] = {}
    cmds: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            parents[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            cmds[int(d)] = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    me, out = os.getpid(), []
    for pid in parents:
        p, seen = pid, 0
        while p in parents and p != me and seen < 64:
            p, seen = parents[p], seen + 1
        if p == me and pid != me:
            out.append(cmds.get(pid, "?"))
    return out


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    """Private sandbox root under /tmp (pytest's tmp_path is 0700: the sandbox uid could not enter it);
    the test fails if a trial left anything in it."""
    root = Path("/tmp") / f"legorl-wtest-{uuid.uuid4().hex[:8]}"
    yield root
    leftovers = list(root.iterdir()) if root.exists() else []
    shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"sandbox dirs left behind: {leftovers}"
