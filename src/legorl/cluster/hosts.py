"""Sandbox hosts: AgentLoopWorker actors, so trials (their sandboxes, scaffolds, verifiers) run on the host's node.

    driver: HostsRunner --run_trial (one Ray call per trial)--> SandboxHostActor i (WorkerRunner)
                                                                   | Ray: open/close session, the record
                                                                 GatewayActor (proxy) <--HTTP-- scaffold

The runner sends each trial to the least-loaded live host when it has a free slot (`rollout.concurrency`
per host), so trials not yet started are never lost with a host. A host that dies takes only its running
trials with it: they come back as `infra_error` results (dropped by the filter, counted), the host is
skipped until Ray has restarted it (`cluster.max_restarts`) and it answers `ping`, and when no host is
left the trials fail at once instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from legorl.agents.base import SessionEndpoint
from legorl.cluster.placement import RolePlacement, import_ray
from legorl.config.run import RunConfig
from legorl.proxy.record import SessionRecord
from legorl.rundir import RunDir
from legorl.trial import TrialResult, TrialSpec
from legorl.workers.artifacts import write_result
from legorl.workers.runner import OnDone
from legorl.workers.worker import run_each, with_trial_id

log = logging.getLogger(__name__)
START_TIMEOUT_S = 300.0
CLOSE_TIMEOUT_S = 60.0


class GatewayEndpoints:
    """Trial sessions on the gateway actor's proxy: opened and closed over Ray, reached by the scaffold over HTTP.

    The record comes back as a Ray object and is written here (`proxy_trajectory.json` in the trial dir on this
    host's node), not by the gateway: on another node the gateway could not write into this host's run dir.
    Each session's metadata names its host (`sandbox_host`), so the gateway can tell which sessions a dead
    host left open.
    """

    captures_tokens = True

    def __init__(self, gateway: Any, host: int | None = None, close_timeout_s: float = CLOSE_TIMEOUT_S):
        self.gateway, self.host = gateway, host
        self.close_timeout_s = close_timeout_s

    async def open(self, metadata: dict[str, Any]) -> tuple[SessionEndpoint, str | None]:
        meta = metadata if self.host is None else {**metadata, "sandbox_host": self.host}
        s = await self.gateway.open_session.remote(meta)
        return SessionEndpoint(s["openai_base_url"], s["anthropic_base_url"], model=s["model"]), s["session_id"]

    async def close(self, handle: str | None, out_dir: Path | None) -> SessionRecord | None:
        if handle is None:
            return None
        try:
            record = await asyncio.wait_for(self.gateway.close_session.remote(handle, None), self.close_timeout_s)
        except (Exception, TimeoutError) as exc:  # a dead or hung gateway: the trial keeps no tokens
            log.warning("closing session %s on the gateway failed: %s", handle, _short(exc))
            return None
        if record is not None and out_dir is not None:
            await asyncio.to_thread(record.write, out_dir)
        return record


class SandboxHostActor:
    """One sandbox host (wrap with `ray.remote(**placement.options(i), max_restarts=...)`; an async actor).

    Ray re-runs `__init__` on restart, so a restarted host is ready again as soon as it answers `ping`.
    """

    def __init__(self, cfg_json: str, run_root: str, gateway: Any, index: int):
        from legorl.workers.config import worker_config
        from legorl.workers.runner import WorkerRunner

        cfg = RunConfig.model_validate_json(cfg_json)
        self.index = index
        self.runner = WorkerRunner(worker_config(cfg, Path(run_root)), GatewayEndpoints(gateway, index))
        self.slots = self.runner.config.max_trials
        self._gate = asyncio.Semaphore(self.slots)  # the cap holds whoever calls
        self._running: dict[str, asyncio.Task] = {}  # trial id -> its task

    async def run_trial(self, spec: TrialSpec, temperature: float) -> TrialResult:
        task = asyncio.current_task()
        assert task is not None
        self._running[spec.trial_id] = task  # before any await: a `cancel_trial` sent after this call finds it
        try:
            async with self._gate:
                return (await self.runner.run([spec], temperature))[0]
        finally:
            self._running.pop(spec.trial_id, None)

    def cancel_trial(self, trial_id: str) -> bool:
        """Cancel one running trial (its sandbox stops, its session closes). `ray.cancel` alone can miss a call
        the actor has not started yet; Ray starts a caller's calls in order, so this one finds it."""
        task = self._running.get(trial_id)
        if task is None:
            return False
        task.cancel()
        return True

    def ping(self) -> int:
        return self.index

    def info(self) -> dict[str, Any]:
        import ray

        return {"index": self.index, "node_ip": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(), "slots": self.slots,
                "running": len(self._running)}

    async def close(self) -> None:
        """Cancel running trials (each stops its sandbox and closes its session in a `finally`)."""
        tasks = [t for t in self._running.values() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


HostState = Literal["live", "restarting", "gone"]


@dataclass
class _Host:
    index: int
    actor: Any
    slots: int
    node_ip: str = "?"
    inflight: int = 0
    state: HostState = "live"
    probe: asyncio.Task | None = None

    def name(self) -> str:
        return f"sandbox host {self.index} ({self.node_ip})"


class HostsRunner:
    """The `TrialRunner` over sandbox host actors: one remote call per trial, least-loaded live host first."""

    captures_tokens = True

    def __init__(self, hosts: Sequence[Any], infos: Sequence[dict[str, Any]] | None = None,
                 placement: RolePlacement | None = None, output_root: Path | None = None, exp_name: str = "default",
                 revive_wait_s: float = 60.0, probe_interval_s: float = 0.5, gateway: Any = None):
        infos = list(infos) if infos is not None else [{} for _ in hosts]
        self.hosts = [_Host(i, a, int(info.get("slots", 1 << 30)), str(info.get("node_ip", "?")))
                      for i, (a, info) in enumerate(zip(hosts, infos, strict=True))]
        self.placement = placement
        self.output_root, self.exp_name = output_root, exp_name  # where a lost trial's result.json goes
        self.revive_wait_s = revive_wait_s  # how long a trial waits when every host is restarting
        self.probe_interval_s = probe_interval_s
        self.gateway = gateway  # told to close a dead host's sessions (their trials will never close them)
        self.lost = 0  # trials that ended as infra_error here (host died, none alive, call failed)
        self.deaths = 0
        self._cond = asyncio.Condition()

    # -- running trials -----------------------------------------------------------------------------
    async def run(self, specs: Sequence[TrialSpec], temperature: float,
                  on_done: OnDone | None = None) -> list[TrialResult]:
        # ids are given here, not on the host, so a trial lost with its host still has one
        return await run_each([with_trial_id(s) for s in specs], lambda spec: self._run_one(spec, temperature),
                              on_done)

    async def _run_one(self, spec: TrialSpec, temperature: float) -> TrialResult:
        import ray

        t0 = time.monotonic()
        host = await self._acquire()
        if host is None:
            states = ", ".join(f"{h.index}: {h.state}" for h in self.hosts)
            return self._lost(spec, t0, None, f"no sandbox host alive ({states})")
        died = False
        ref = host.actor.run_trial.remote(spec, temperature)
        try:
            res: TrialResult = await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            host.actor.cancel_trial.remote(spec.trial_id)
            raise
        except ray.exceptions.RayActorError as exc:  # the host died (or is restarting) with the trial on it
            died = True
            return self._lost(spec, t0, host, f"{host.name()} died: {_short(exc)}")
        except Exception as exc:  # run_trial raised on the host (e.g. the gateway is gone)
            return self._lost(spec, t0, host, f"{host.name()} failed the trial: {_short(exc)}")
        finally:
            await self._release(host, died)
        res.metadata.update(sandbox_host=host.index, sandbox_node=host.node_ip)
        return res

    def _lost(self, spec: TrialSpec, t0: float, host: _Host | None, reason: str) -> TrialResult:
        self.lost += 1
        log.warning("trial %s lost: %s", spec.trial_id, reason)
        meta = {"sandbox_host": host.index} if host is not None else {}
        res = TrialResult(spec=spec, outcome="infra_error", reason=reason, reward=None,
                          duration_s=time.monotonic() - t0, metadata=meta)
        if self.output_root is not None:  # the dashboard and `legorl doctor` see lost trials too
            tdir = RunDir(self.output_root, self.exp_name).trial_dir(spec.step, spec.trial_id)
            try:
                tdir.mkdir(parents=True, exist_ok=True)
                write_result(tdir / "result.json", res)
                res.artifacts_dir = str(tdir)
            except OSError as exc:
                log.warning("cannot write %s: %s", tdir / "result.json", exc)
        return res

    # -- host selection and health ------------------------------------------------------------------
    async def _acquire(self) -> _Host | None:
        """A slot on the least-loaded live host (ties: lowest index); None when no host can come back in time."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        async with self._cond:
            while True:
                live = [h for h in self.hosts if h.state == "live"]
                free = [h for h in live if h.inflight < h.slots]
                if free:
                    host = min(free, key=lambda h: (h.inflight, h.index))
                    host.inflight += 1
                    return host
                if live:  # all busy: wait for a slot
                    await self._cond.wait()
                    continue
                if not any(h.state == "restarting" for h in self.hosts):
                    return None
                deadline = deadline if deadline is not None else loop.time() + self.revive_wait_s
                try:
                    await asyncio.wait_for(self._cond.wait(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    return None

    async def _release(self, host: _Host, died: bool) -> None:
        async with self._cond:
            host.inflight -= 1
            if died and host.state == "live":
                self.deaths += 1
                host.state = "restarting"
                host.probe = asyncio.create_task(self._probe(host), name=f"legorl-host-probe-{host.index}")
                if self.gateway is not None:
                    self.gateway.close_host_sessions.remote(host.index)
            self._cond.notify_all()

    async def _probe(self, host: _Host) -> None:
        """Ping a dead host until Ray has restarted it (live again) or says it is dead for good (twice)."""
        import ray

        died_twice = 0
        state: HostState = "live"
        while True:
            try:
                await asyncio.wait_for(host.actor.ping.remote(), 30.0)
                break
            except ray.exceptions.ActorDiedError:  # no restart left (checked twice: not a transient state)
                died_twice += 1
                if died_twice >= 2:
                    state = "gone"
                    break
            except (ray.exceptions.RayActorError, TimeoutError):  # still restarting
                died_twice = 0
            await asyncio.sleep(self.probe_interval_s)
        if state == "live":
            with contextlib.suppress(Exception):
                info = await host.actor.info.remote()
                host.node_ip = str(info.get("node_ip", host.node_ip))
        log.warning("%s %s", host.name(), "is back" if state == "live" else "is gone for good (no restart left)")
        async with self._cond:
            host.state, host.probe = state, None
            self._cond.notify_all()

    def states(self) -> dict[int, HostState]:
        return {h.index: h.state for h in self.hosts}

    async def wait_live(self, timeout_s: float = 60.0) -> bool:
        """True once every host that can come back is live (tests, and a driver between steps)."""
        deadline = time.monotonic() + timeout_s
        while any(h.state == "restarting" for h in self.hosts):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    def metrics(self) -> dict[str, float]:
        return {"cluster/hosts_live": float(sum(h.state == "live" for h in self.hosts)),
                "cluster/host_deaths": float(self.deaths), "cluster/host_trials_lost": float(self.lost)}

    # -- lifecycle ----------------------------------------------------------------------------------
    async def close(self) -> None:
        """Close every host (its running trials are cancelled), kill the actors, release their placement."""
        import ray

        for h in self.hosts:
            if h.probe is not None:
                h.probe.cancel()
                with contextlib.suppress(BaseException):
                    await h.probe
        closing = [h.actor.close.remote() for h in self.hosts if h.state != "gone"]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), CLOSE_TIMEOUT_S)
        for h in self.hosts:
            with contextlib.suppress(Exception):
                ray.kill(h.actor, no_restart=True)
            h.state = "gone"
        if self.placement is not None:
            self.placement.release()


async def start_hosts(cfg: RunConfig, run_root: str, gateway: Any) -> tuple[HostsRunner, RolePlacement]:
    """`cluster.sandbox_hosts` host actors placed by `cluster.hosts`, each answering `info` before this returns."""
    ray = import_ray()
    n = cfg.cluster.sandbox_hosts
    placement = RolePlacement.reserve("hosts", cfg.cluster.hosts, n)
    actors: list[Any] = []
    try:
        cls = ray.remote(SandboxHostActor)
        # `rollout.concurrency` is the run's: each host takes its share
        share = max(1, -(-cfg.rollout.concurrency // n))
        cfg_json = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"concurrency": share})}
                                  ).model_dump_json()
        for i in range(n):
            opts = placement.options(i, max_restarts=cfg.cluster.max_restarts, max_task_retries=0)
            actors.append(cls.options(**opts).remote(cfg_json, str(run_root), gateway, i))
        infos = await asyncio.wait_for(asyncio.gather(*(a.info.remote() for a in actors)), START_TIMEOUT_S)
    except BaseException:
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)
        placement.release()
        raise
    log.info("sandbox hosts: %s", ", ".join(f"{i['index']}@{i['node_ip']}" for i in infos))
    return HostsRunner(actors, infos, placement, Path(run_root), cfg.run.name, gateway=gateway), placement


def _short(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
