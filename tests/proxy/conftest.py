"""Proxy fixtures: the session's tiny-llama engine (tests/conftest.py) behind a fresh proxy
server per test (aiohttp servers are bound to the test's event loop)."""

from __future__ import annotations

import pytest

from legorl.proxy import ProxyConfig, ProxyServer
from legorl.serving.manager import SingleReplicaManager


@pytest.fixture(scope="session")
def manager(engine):
    return SingleReplicaManager(engine, engine.max_model_len)


@pytest.fixture(scope="session")
def hf_model(tiny_llama_dir):
    """An independent HF copy of the tiny model for teacher-forced recomputes."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()


@pytest.fixture
async def proxy(manager, tokenizer):
    server = ProxyServer(manager, tokenizer, ProxyConfig(max_body_bytes=256 * 1024))
    await server.start()
    yield server
    await server.close()


def make_proxy(manager, tokenizer, **kw) -> ProxyServer:
    return ProxyServer(manager, tokenizer, ProxyConfig(**kw))
