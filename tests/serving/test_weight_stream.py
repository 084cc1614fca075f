"""WeightSync.push_stream: buckets go to the embedded engine as they come and merged to a whole-checkpoint
target (what a vLLM replica needs: its reload rebuilds a checkpoint per call, and a second bucket of the
same version would be dropped by its per-version export cache). The recording target stands in for
vLLM's update path, whose own test (test_vllm_train) runs a real server."""

from __future__ import annotations

import pytest
import torch

from legorl.serving.embedded import EmbeddedEngine
from legorl.serving.vllm.weights import SafetensorsExporter
from legorl.serving.weight_sync import WeightSync


class WholeTarget:
    """Records every update it is given (no `accepts_weight_buckets`: wants the whole state)."""

    weight_version = 0

    def __init__(self) -> None:
        self.updates: list[dict] = []

    async def pause(self, mode="wait") -> None: ...

    async def resume(self) -> None: ...

    async def update_weights(self, state_dict, version, mode="wait") -> None:
        self.updates.append(dict(state_dict))
        self.weight_version = version


async def test_buckets_stream_to_the_engine_and_merge_for_whole_targets(tiny_llama_dir):
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=1024)
    await engine.start()
    try:
        state = {k: v.clone() + 0.01 for k, v in engine.model.state_dict().items()}
        names = list(state)
        buckets = [{k: state[k] for k in names[i : i + 5]} for i in range(0, len(names), 5)]
        whole = WholeTarget()
        seen: list[int] = []

        def produce(emit) -> int:
            for b in buckets:
                emit(b)
                seen.append(len(b))
            return 0

        sync = WeightSync([engine, whole])
        assert await sync.push_stream(produce) == 1
        assert len(seen) == len(buckets) > 1
        assert [set(u) for u in whole.updates] == [set(names)]  # one merged update
        assert all(torch.equal(engine.model.state_dict()[k], state[k]) for k in names)
        assert engine.weight_version == 1 and whole.weight_version == 1
        assert sync.last_bytes == sum(v.numel() * v.element_size() for v in state.values())
    finally:
        await engine.close()


async def test_a_failed_push_stops_the_producer_and_keeps_the_version(tiny_llama_dir):
    engine = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=1024)
    await engine.start()
    try:
        def produce(emit) -> int:
            for _ in range(50):  # would block forever on the bounded queue if nobody drained it
                emit({"no.such.weight": torch.zeros(1)})
            return 0

        sync = WeightSync([engine])
        with pytest.raises(Exception, match="unknown parameter"):
            await sync.push_stream(produce)
        assert sync.version == 0
    finally:
        await engine.close()


def test_shared_exporter_files_go_with_the_last_user(tmp_path):
    exp = SafetensorsExporter(tmp_path).share(2)
    assert exp.root.is_dir()
    exp.close()
    assert exp.root.is_dir()  # one replica still uses it
    exp.close()
    assert not exp.root.exists()

