"""`legorl train` on a 3-node Ray cluster simulated on this machine (`ray.cluster_utils.Cluster`).

Head node: the driver, the gateway and 2 trainer ranks (resource `head`); two rollout nodes (resource
`rollout`), each with one engine replica and one sandbox host (STRICT_SPREAD). Tiny model. Faults are
real: a replica's process is SIGKILLed between two steps (Ray restarts it; the gateway fails its
sessions over, then revives it with the current weights), a sandbox host's process is SIGKILLed while
its trials run (they end as infra failures, filtered and counted).

The sync run uses the collective weight transport (`cluster.weight_transport = "collective"`, gloo pair groups
between trainer rank 0 and each replica) with deltas (`cluster.weight_delta = true`) and also SIGKILLs a replica
in the middle of step 1's broadcast: the driver's forwarding of the second bucket is wrapped (monkeypatched) only
to pick that moment, the kill is real. Its third step samples with weights that reached a replica as a delta.
The async run keeps the object-store transport (the default).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

pytest.importorskip("ray")

from legorl.config import load_config
from legorl.train.loop import train

pytestmark = pytest.mark.slow

CLASSES = ("ReplicaActor", "GatewayActor", "SandboxHostActor", "TrainerRankActor")


def _alive(cls: str) -> list[dict]:
    """Live actors of a class, from the GCS (the state API needs the dashboard, which these nodes do not run)."""
    import ray._private.state

    return [a for a in ray._private.state.actors().values()
            if a["ActorClassName"] == cls and a["State"] == "ALIVE"]


def _config(tiny_run_config, name: str, cluster: dict | None = None, trainer: dict | None = None,
            serving: dict | None = None, **extra):
    return load_config(tiny_run_config(
        name,
        agent={"kwargs": {"tools": False}},
        serving={"n_replicas": 2, "threads_per_replica": 1, **(serving or {})},
        trainer={"train_batch_size": 2, "total_steps": 2, "n_ranks": 2, **(trainer or {})},
        cluster={
            **(cluster or {}),
            "runtime": "ray", "sandbox_hosts": 2, "max_restarts": 2,
            "engines": {"resources": {"rollout": 0.4}, "strategy": "STRICT_SPREAD"},
            "hosts": {"resources": {"rollout": 0.4}, "strategy": "STRICT_SPREAD"},
            "trainer": {"resources": {"head": 0.4}, "strategy": "PACK"},
            "gateway": {"resources": {"head": 0.1}},
        },
        **extra,
    ))


def _nodes_of(cls: str) -> set[str]:
    return {a["Address"]["NodeID"] for a in _alive(cls)}


def _assert_all_gone() -> None:
    for cls in CLASSES:
        assert _alive(cls) == [], f"{cls} actors outlived the run"


async def test_sync_steps_survive_a_dead_replica_and_a_dead_sandbox_host(ray_cluster, tiny_run_config, monkeypatch):
    # 1 MB buckets: the tiny model's weights travel in several, so a replica can die between two of them
    # lr 3e-5 (the demo's): most fp32 high words stay bitwise put, so the deltas are smaller than the weights
    # round-robin routing: step 2's first two calls go one to each replica, so one of them meets the replica killed
    # between the steps whatever the timing (the sticky balancer's prompt affinity could send all of step 2's
    # sessions to the survivor, and the step-2 sync then found the dead one instead: a flake)
    cfg = _config(tiny_run_config, "sync", cluster={"weight_transport": "collective", "weight_sync_timeout_s": 30,
                                                    "weight_delta": True},
                  trainer={"weight_bucket_mb": 1, "total_steps": 3, "lr": 3e-5},
                  serving={"balancer": "round_robin"})
    placed: dict[str, set[str]] = {}
    from legorl.cluster.runtime import GatewayTarget

    forward = GatewayTarget.update_weights
    sent = {"buckets": 0}

    async def kill_mid_broadcast(self, bucket, version, mode="wait"):
        sent["buckets"] += 1
        if version == 1 and sent["buckets"] == 2:  # step 1's sync: bucket 1 delivered, bucket 2 on the wire
            placed["killed_in_sync"] = {_alive("ReplicaActor")[0]["Pid"]}
            os.kill(next(iter(placed["killed_in_sync"])), signal.SIGKILL)
        await forward(self, bucket, version, mode)

    monkeypatch.setattr(GatewayTarget, "update_weights", kill_mid_broadcast)

    def on_line(line: str) -> None:
        if line.startswith("step:1 "):
            placed["replicas"] = _nodes_of("ReplicaActor")
            placed["hosts"] = _nodes_of("SandboxHostActor")
            os.kill(_alive("ReplicaActor")[0]["Pid"], signal.SIGKILL)  # between steps: step 2's calls find it dead

    async def kill_a_host_in_step_2() -> None:
        step2 = cfg_run / "step_2"
        while not (step2.exists() and any(step2.iterdir())):
            await asyncio.sleep(0.05)
        os.kill(_alive("SandboxHostActor")[0]["Pid"], signal.SIGKILL)

    from legorl.rundir import RunDir

    cfg_run = RunDir.of(cfg.run.output_dir, cfg.run.name).trials
    killer = asyncio.create_task(kill_a_host_in_step_2())
    try:
        history = await train(cfg, on_line=on_line, progress=False)
    finally:
        killer.cancel()
    assert [h["step"] for h in history] == [1, 2, 3]
    assert len(placed["replicas"]) == 2 and len(placed["hosts"]) == 2  # one of each per rollout node
    s1 = history[0]
    assert s1["weight_sync/delta_share"] == 1.0  # nothing sent before: whole
    # the replica killed mid-broadcast was marked dead, the sync finished on the other, and it came back with a
    # full sync before step 1 ended
    assert sent["buckets"] > 2 and placed["killed_in_sync"]
    assert s1["cluster/weight_sync_failures"] >= 1 and s1["cluster/replicas_revived"] >= 1
    assert s1["pool/healthy"] == 2 and s1["weight_sync/revive_s"] > 0
    s2 = history[1]
    assert s2["cluster/replicas_revived"] >= 1 and s2["pool/healthy"] == 2  # back before step 2 ended
    assert s2["manager/failovers"] >= 1  # step 2's sessions on the dead replica moved
    assert s2["weight_version"] == 2.0 and s2["actor/grad_norm"] > 0
    assert s2.get("rollout/outcome/infra_error", 0) > 0  # the killed host's trials, counted
    assert s2["weight_sync/bytes"] > 0 and s2["timing/weight_sync_s"] > 0
    # no replica served step 2 with other weights than version 1 (a restarted one comes back at version 0
    # and must get version 1 before it serves again)
    versions = set()
    for rec in (cfg_run / "step_2").rglob("proxy_trajectory.json"):
        main = json.loads(rec.read_text())["branches"][0]
        versions |= {v for v, m in zip(main["weight_versions"], main["mask"], strict=True) if m}
    assert versions == {1}
    # the replicas served step 2 with exactly the trainer's version-1 weights (revived ones included)
    assert s2["rollout_corr/abs_diff_mean"] <= 1e-5
    # step 2's sync went as deltas to the replica that held version 1 (the other, killed between the steps, got
    # a full sync when revived); step 3 sampled with those weights and still matches the trainer's recompute
    assert 0 < s2["weight_sync/delta_share"] < 1 and history[2]["weight_sync/delta_share"] < 1
    assert history[2]["rollout_corr/abs_diff_mean"] <= 1e-5 and history[2]["weight_version"] == 3.0
    _assert_all_gone()


async def test_async_steps_on_the_cluster(ray_cluster, tiny_run_config):
    """Also the object-store transport's revival: a replica SIGKILLed after step 1 is restarted by Ray and the
    gateway pushes it the last synced buckets (kept as object refs) before it serves again."""
    cfg = _config(tiny_run_config, "async", async_training={"enabled": True, "staleness_threshold": 1,
                                                            "partial_rollout": True})
    killed: list[int] = []

    def on_line(line: str) -> None:
        if line.startswith("step:1 "):
            killed.append(_alive("ReplicaActor")[0]["Pid"])
            os.kill(killed[0], signal.SIGKILL)

    history = await train(cfg, on_line=on_line, progress=False)
    assert [h["step"] for h in history] == [1, 2]
    assert history[-1]["weight_version"] == 2.0
    assert all(h["fully_async/staleness/max"] <= 1 for h in history)
    s2 = history[-1]
    assert killed and s2["cluster/replicas_revived"] >= 1 and s2["pool/healthy"] == 2, s2
    _assert_all_gone()
