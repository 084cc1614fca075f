"""Fixtures of the external-scaffold tests: the tiny engine, a one-file task, a sandbox root in /tmp."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path

import pytest

from legorl.serving.manager import SingleReplicaManager
from legorl.tasks.model import Task, TaskLimits


@pytest.fixture(scope="module")
def tiny_stack(tiny_llama_dir):
    from legorl.models.chat import load_tokenizer
    from legorl.serving.embedded import EmbeddedEngine

    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=16384, seed=0)
    yield SingleReplicaManager(engine, engine.max_model_len), load_tokenizer(tiny_llama_dir)
    asyncio.run(engine.close())


@pytest.fixture
def task(tmp_path: Path) -> Task:
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "hello.txt").write_text("hi\n")
    (root / "tests").mkdir()
    return Task(id="mini-t", path=root, instruction="create done.txt", limits=TaskLimits(memory_mb=1024))


@pytest.fixture
def sandbox_root():
    root = Path("/tmp") / f"legorl-test-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)
