"""The engine launcher's defaults."""

from __future__ import annotations


def test_default_engine_threads_leave_a_core_for_the_pipeline():
    from legorl.serving.launch import default_threads_per_replica

    assert default_threads_per_replica(1, cores=2) == 1
    assert default_threads_per_replica(1, cores=16) == 15
    assert default_threads_per_replica(2, cores=16) == 7
    assert default_threads_per_replica(4, cores=2) == 1


async def test_the_run_configs_decode_attention_reaches_every_replica(tiny_run_config, tiny_llama_dir):
    """`serving.decode_attention` -> engine_spec -> start_engines -> each embedded replica's decode path."""
    from legorl.config import load_config
    from legorl.runtime.inprocess import engine_spec
    from legorl.serving.launch import start_engines

    path = tiny_run_config("t")
    for mode, kernel in (("torch", False), ("auto", True)):
        cfg = load_config(path, [f"serving.decode_attention={mode}", "serving.n_replicas=2"])
        spec = engine_spec(cfg, tiny_llama_dir)
        assert spec.decode_attention == mode
        engines = await start_engines(spec)
        try:
            assert [e.decode_kernel for e in engines] == [kernel, kernel]
        finally:
            for e in engines:
                await e.close()
