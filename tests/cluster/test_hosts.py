"""Sandbox hosts as Ray actors (cluster/hosts.py) on a local Ray, with a real gateway actor (tiny model).

Nothing is mocked: the gateway runs the tiny engine and its proxy in its own actor process, each host actor
runs real bwrap sandboxes and the builtin scaffold, which calls the gateway's proxy over HTTP; host deaths
are real `ray.kill`s, and Ray restarts the host.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from legorl.config import load_config
from legorl.tasks import load_task, load_tasks
from legorl.trial import INFRA_OUTCOMES, TrialSpec
from legorl.workers.filter import TrajectoryFilter

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def tasks():
    return sorted(load_tasks("builtin:shell-basics"), key=lambda t: t.id)


def _specs(tasks, n_tasks: int, attempts: int = 2, step: int = 1) -> list[TrialSpec]:
    return [TrialSpec(t, attempt=a, group_id=t.id, step=step) for t in tasks[:n_tasks] for a in range(attempts)]


def _slow_copies(tasks, root: Path) -> list:
    """Copies of `tasks` whose verifier sleeps for ten minutes: a trial of them cannot end on its own."""
    out = []
    for t in tasks:
        slow = root / "slow" / t.id
        shutil.copytree(t.path, slow)
        (slow / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 600\n")
        out.append(load_task(slow))
    return out


def _alive_hosts() -> list[dict]:
    """Live host actors, from the GCS (the state API needs the dashboard, which this Ray does not run)."""
    import ray._private.state

    return [a for a in ray._private.state.actors().values()
            if a["ActorClassName"] == "SandboxHostActor" and a["State"] != "DEAD"]


async def _start(ray, tiny_run_config, name: str):
    from legorl.cluster.gateway import GatewayActor
    from legorl.cluster.hosts import start_hosts

    cfg = load_config(tiny_run_config(name, agent={"kwargs": {"tools": False}},
                                      cluster={"runtime": "ray", "sandbox_hosts": 2, "max_restarts": 2}))
    run_root = Path(cfg.run.output_dir) / name
    gateway = ray.remote(GatewayActor).options(num_cpus=0).remote()
    await gateway.start.remote(cfg.model_dump_json(), str(run_root), None)
    runner, placement = await start_hosts(cfg, str(run_root), gateway)
    assert runner.placement is placement and [h.slots for h in runner.hosts] == [2, 2]  # concurrency 4 shared out
    return gateway, runner, run_root


async def _close_and_check_gone(ray, gateway, runner) -> None:
    """(c) close: every host actor is gone, then the gateway (a dead gateway: closing a session gives None)."""
    from legorl.cluster.hosts import GatewayEndpoints

    await runner.close()
    deadline = time.monotonic() + 30
    while _alive_hosts() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert _alive_hosts() == [], "host actors outlived close()"
    assert await GatewayEndpoints(gateway).close("no-such-session", None) is None
    await gateway.close.remote()
    ray.kill(gateway)
    assert await GatewayEndpoints(gateway, close_timeout_s=10).close("any", None) is None  # a dead gateway


async def test_trials_spread_over_two_hosts_with_the_gateways_exact_records(local_ray, tiny_run_config, tasks,
                                                                          tmp_path):
    gateway, runner, run_root = await _start(local_ray, tiny_run_config, "hosts-a")
    try:
        specs = _specs(tasks, 2)
        seen: list[str] = []
        results = await runner.run(specs, 1.0, on_done=lambda r: seen.append(r.trial_id))
        assert [r.spec.task.id for r in results] == [s.task.id for s in specs]  # input order
        assert sorted(seen) == sorted(r.trial_id for r in results) and len(set(seen)) == 4
        assert sorted(r.metadata["sandbox_host"] for r in results) == [0, 0, 1, 1]  # least loaded, ties by index
        for r in results:
            assert r.outcome in ("failed", "solved"), r.reason
            assert r.tokens is not None and r.tokens.num_policy_tokens > 0
            tdir = Path(r.artifacts_dir)
            assert tdir.is_relative_to(run_root / "trials") and (tdir / "result.json").exists()
            # the proxy's record, as the gateway returned it: the trial's tokens are exactly its main branch
            rec = json.loads((tdir / "proxy_trajectory.json").read_text())
            main = rec["branches"][0]
            assert rec["metadata"]["trial_id"] == r.trial_id
            assert rec["metadata"]["sandbox_host"] == r.metadata["sandbox_host"]
            assert r.tokens.capture["session_id"] == rec["session_id"]
            assert r.tokens.token_ids == main["token_ids"] and r.tokens.response_mask == main["mask"]
            policy = [i for i, m in enumerate(main["mask"]) if m]
            assert [r.tokens.logprobs[i] for i in policy] == [main["logprobs"][i] for i in policy]
            assert all(lp <= 0.0 for lp in r.tokens.logprobs) and any(lp < 0.0 for lp in r.tokens.logprobs)
            assert [r.tokens.weight_versions[i] for i in policy] == [0] * len(policy)
        assert len({r.tokens.capture["session_id"] for r in results}) == 4
        assert runner.metrics()["cluster/host_trials_lost"] == 0.0

        # cancelling the batch cancels the trials on the hosts (ray.cancel): nothing keeps running there.
        # Their verifiers sleep, so no trial can finish before the cancel lands (the tiny model's trials
        # take well under a second: with the real tasks one could end first on a loaded machine).
        batch = asyncio.create_task(runner.run(_specs(_slow_copies(tasks[:2], tmp_path), 2, step=2), 1.0))
        while sum(h.inflight for h in runner.hosts) < 4:
            await asyncio.sleep(0.01)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        assert [h.inflight for h in runner.hosts] == [0, 0]
        deadline = time.monotonic() + 30
        while any([(await h.actor.info.remote())["running"] for h in runner.hosts]):
            assert time.monotonic() < deadline, "cancelled trials still run on the hosts"
            await asyncio.sleep(0.1)
        assert not list(run_root.glob("trials/*/step_2/*/result.json"))  # cut, not run to the end
    finally:
        await _close_and_check_gone(local_ray, gateway, runner)


@pytest.mark.slow
async def test_a_killed_host_loses_only_its_running_trials_and_comes_back(local_ray, tiny_run_config, tasks):
    ray = local_ray
    gateway, runner, _ = await _start(local_ray, tiny_run_config, "hosts-b")
    try:
        victim = runner.hosts[1]
        pid_before = (await victim.actor.info.remote())["pid"]
        batch = asyncio.create_task(runner.run(_specs(tasks, 4), 1.0))
        while victim.inflight == 0:
            await asyncio.sleep(0.01)
        running = victim.inflight
        ray.kill(victim.actor, no_restart=False)
        results = await asyncio.wait_for(batch, 120)
        assert len(results) == 8
        lost = [r for r in results if r.outcome == "infra_error"]
        assert lost and all(r.metadata["sandbox_host"] == 1 for r in lost) and len(lost) <= running
        assert all("sandbox host 1" in r.reason and "Actor" in r.reason and r.reward is None for r in lost)
        for r in lost:  # the driver wrote their result.json (the dashboard and doctor count them)
            assert json.loads((Path(r.artifacts_dir) / "result.json").read_text())["outcome"] == "infra_error"
        assert {r.metadata["sandbox_host"] for r in results if r.outcome != "infra_error"} >= {0}
        kept, stats = TrajectoryFilter()(results)
        assert len(kept) == len(results) - len(lost)
        assert "infra_error" in INFRA_OUTCOMES and stats.dropped["infra_error"] == len(lost)
        deadline = time.monotonic() + 10  # the gateway closed the dead host's sessions (nobody else would)
        while (await gateway.health.remote())["sessions"] and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert (await gateway.health.remote())["sessions"] == 0
        m = runner.metrics()
        assert m["cluster/host_deaths"] == 1.0 and m["cluster/host_trials_lost"] == len(lost)

        # Ray restarts it; once it answers ping again, the next batch runs on both hosts
        assert await runner.wait_live(60) and runner.states() == {0: "live", 1: "live"}
        assert (await victim.actor.info.remote())["pid"] != pid_before
        again = await runner.run(_specs(tasks, 2, step=2), 1.0)
        assert [r.outcome for r in again if r.outcome in INFRA_OUTCOMES] == [], [r.reason for r in again]
        assert {r.metadata["sandbox_host"] for r in again} == {0, 1}

        # no host left (no restart): trials fail at once as infra errors instead of hanging
        for h in runner.hosts:
            ray.kill(h.actor, no_restart=True)
        dying = await asyncio.wait_for(runner.run(_specs(tasks, 3, step=3), 1.0), 60)
        assert [r.outcome for r in dying] == ["infra_error"] * 6
        assert await runner.wait_live(30) and runner.states() == {0: "gone", 1: "gone"}
        t0 = time.monotonic()
        none = await runner.run(_specs(tasks, 2, step=4), 1.0)
        assert time.monotonic() - t0 < 5 and [r.outcome for r in none] == ["infra_error"] * 4
        assert all("no sandbox host alive" in r.reason for r in none)
    finally:
        await _close_and_check_gone(local_ray, gateway, runner)
