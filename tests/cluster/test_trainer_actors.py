"""Trainer ranks as Ray actors (`RayTrainer`): two FSDP2 ranks on gloo train like one in-process StepTrainer,
their weights come back as object-store refs, sharded checkpoints round-trip into a fresh group, and a
killed rank fails the next call instead of hanging it, leaving no actor behind."""

from __future__ import annotations

import os
import time

import pytest
import torch

ray = pytest.importorskip("ray")

from legorl.cluster.trainer import RayTrainer  # noqa: E402
from legorl.config import load_config  # noqa: E402
from legorl.serving.weight_sync import RemoteBucket  # noqa: E402
from legorl.train.batch import TrainBatch  # noqa: E402
from legorl.train.build import build_trainer  # noqa: E402
from legorl.train.ranks import RankFailedError  # noqa: E402
from legorl.train.trainer import LogprobMismatchError  # noqa: E402


def config(model_dir, *overrides: str):
    # 1 MB buckets: the tiny model's weights come back in more than one
    return load_config(None, [f"model.path={model_dir}", "cluster.runtime=ray", "trainer.lr=1e-3", "trainer.micro_batch_size=2",
                              "algorithm.entropy_coef=0.01", "trainer.n_ranks=2", "trainer.weight_bucket_mb=1",
                              *overrides])


def batch(seed: int) -> TrainBatch:
    """Six rows of mixed lengths in two groups, half rewarded: GRPO has a signal."""
    g = torch.Generator().manual_seed(seed)
    lengths = [12 + 9 * ((i * 5) % 6) for i in range(6)]
    t = max(lengths)
    ids = torch.randint(0, 1000, (6, t), generator=g)
    am = torch.zeros(6, t, dtype=torch.long)
    mask = torch.zeros(6, t)
    for i, n in enumerate(lengths):
        am[i, :n] = 1
        mask[i, 6:n] = 1
    return TrainBatch(ids * am, am, mask, torch.zeros(6, t), torch.tensor([float(i % 2) for i in range(6)]),
                      [f"g{i // 3}" for i in range(6)], prompt_lens=[6] * 6)


def fetch(trainer: RayTrainer) -> tuple[dict[str, torch.Tensor], list[RemoteBucket], int]:
    buckets: list[RemoteBucket] = []
    nbytes = trainer.stream_weights(buckets.append)
    weights: dict[str, torch.Tensor] = {}
    for b in buckets:
        weights.update(ray.get(b.ref))
    return weights, buckets, nbytes


def rel(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).norm() / b[k].norm().clamp(min=1e-12)) for k in b)


@pytest.fixture(scope="module")
def trained(local_ray, tiny_llama_dir):
    """Two rank actors after one update on batch(0): (trainer, metrics, weights, buckets, bytes)."""
    trainer = RayTrainer(config(tiny_llama_dir), tiny_llama_dir)
    try:
        metrics = trainer.update(batch(0))
        yield (trainer, metrics, *fetch(trainer))
    finally:
        trainer.close()


def test_two_rank_actors_train_like_one_process(trained, tiny_llama_dir):
    trainer, metrics, weights, buckets, nbytes = trained
    torch.manual_seed(0)
    one = build_trainer(config(tiny_llama_dir, "trainer.n_ranks=1"), tiny_llama_dir)
    expected = one.update(batch(0))
    want = one.weights()
    assert trainer.pad_id == one.pad_id
    # the same tolerance as test_trainer_ranks (2 ranks in child processes vs one process)
    assert weights.keys() == want.keys() and rel(weights, want) < 1e-5
    for key, value in expected.items():
        # timing/* and perf/* (padding, computed-token share) describe how the rows were laid out over ranks
        # and micro-batches (shared-prefix groups stay whole per rank), not what was learned
        if not key.startswith(("timing/", "perf/")):
            assert metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key
    # the refs are the whole state dict, in more than one bucket, and their sizes are what they hold
    assert len(buckets) > 1 and all(isinstance(b.ref, ray.ObjectRef) for b in buckets)
    assert nbytes == sum(b.nbytes for b in buckets) == sum(v.numel() * v.element_size() for v in want.values())
    for b in buckets:
        part = ray.get(b.ref)
        assert tuple(part) == b.names and b.nbytes == sum(v.numel() * v.element_size() for v in part.values())


def test_save_then_load_into_a_fresh_group(trained, tiny_llama_dir, tmp_path):
    trainer, _, weights, _, _ = trained
    trainer.save(tmp_path)
    assert (tmp_path / "dcp").is_dir() and (tmp_path / "model.safetensors.index.json").is_file()
    trainer.update(batch(1))
    after, _, _ = fetch(trainer)
    # the fresh group reserves a CPU per rank: a placement group, released on close
    fresh = RayTrainer(config(tiny_llama_dir, "cluster.trainer.num_cpus=1"), tiny_llama_dir)
    try:
        group = fresh.placement.group
        assert group is not None
        fresh.load(tmp_path)
        loaded, _, _ = fetch(fresh)
        assert all(torch.equal(loaded[k], weights[k]) for k in weights)
        fresh.update(batch(1))  # the optimizer state came back too: the next step is the same step
        again, _, _ = fetch(fresh)
        assert rel(again, after) < 1e-6
    finally:
        fresh.close()
    assert ray.util.placement_group_table(group)["state"] == "REMOVED"


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_refused_batch_keeps_the_group_and_a_killed_rank_fails_the_next_call(local_ray, tiny_llama_dir):
    trainer = RayTrainer(config(tiny_llama_dir, "trainer.max_logprob_abs_diff=1e-3"), tiny_llama_dir)
    actors, pids = list(trainer.actors), list(trainer.pids)
    try:
        # every rank refuses the batch (its logprobs are not the model's): its own error, the group intact
        with pytest.raises(LogprobMismatchError, match="refusing this batch"):
            trainer.update(batch(0))
        assert fetch(trainer)[2] > 0
        ray.kill(actors[1])
        t0 = time.monotonic()
        with pytest.raises(RankFailedError, match="rank 1 died"):
            trainer.update(batch(0))
        assert time.monotonic() - t0 < 30
        with pytest.raises(RankFailedError):  # the group is gone for good
            trainer.update(batch(0))
    finally:
        trainer.close()
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.node.remote(), timeout=30)
    deadline = time.monotonic() + 30
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(gone(p) for p in pids), pids
