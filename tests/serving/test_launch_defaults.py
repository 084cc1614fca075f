"""The engine launcher's defaults."""

from __future__ import annotations


def test_default_engine_threads_leave_a_core_for_the_pipeline():
    from legorl.serving.launch import default_threads_per_replica

    assert default_threads_per_replica(1, cores=2) == 1
    assert default_threads_per_replica(1, cores=16) == 15
    assert default_threads_per_replica(2, cores=16) == 7
    assert default_threads_per_replica(4, cores=2) == 1
