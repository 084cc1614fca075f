"""Fixtures of the external-scaffold tests: the tiny engine, a one-file task, a sandbox root in /tmp, and the tiny
model with a longer window for Qwen Code's ~1.7k-token prompt."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path

import pytest

from legorl.serving.manager import SingleReplicaManager
from legorl.tasks.model import Task, TaskLimits

LONG_WINDOW = 4096


@pytest.fixture(scope="module")
def long_tiny_dir(tiny_llama_dir, tmp_path_factory):
    """The tiny model with a LONG_WINDOW-token window (a copy: only config.json differs)."""
    out = tmp_path_factory.mktemp("tiny-long") / "model"
    shutil.copytree(tiny_llama_dir, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": LONG_WINDOW}))
    return out


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
