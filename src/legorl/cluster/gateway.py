"""The gateway actor: the proxy, balancer and session scheduler of a Ray run, in front of replica actors.

Scaffolds on every sandbox host reach its proxy over HTTP (`cluster.bind_host`); hosts open and close
trial sessions through Ray and get each session's exact token record back as a Ray object, so no
worker re-tokenises anything. The gateway owns the replicas' routing state (the `ReplicaPool`) and is
the driver's one weight-sync target: each bucket's object ref is forwarded to every healthy replica
(the tensors go from the object store to the replica's node, never through the driver or here), and
the last synced buckets are kept so a replica Ray restarts gets the current weights before it rejoins
(`revive`). A replica that dies during a sync is marked dead and the sync goes on with the others.

With `cluster.weight_transport = "collective"` the buckets that come are layouts (`CollectiveBucket`): each
replica in its `peers` receives the bytes over its pair group with trainer rank 0. Nothing is kept for revival
then: the driver revives a restarted replica itself (`stale_ready`, a fresh pair, a full sync, `rejoin`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Literal

from legorl.config.run import RunConfig
from legorl.proxy import ProxyConfig
from legorl.rundir import RunDir
from legorl.serving.pool import REPLICA_FAILURES, ReplicaPool
from legorl.serving.types import EngineStats

log = logging.getLogger(__name__)
REVIVE_POLL_S = 1.0


class GatewayActor:
    """One per run (wrapped with `ray.remote` by the runtime; an async actor)."""

    def __init__(self) -> None:
        self.server: Any = None
        self.pool: ReplicaPool | None = None
        self._sync_cm: Any = None
        self._sync_lock = asyncio.Lock()
        self._last: tuple[int, list[Any]] | None = None  # (version, buckets) of the last complete sync
        self._incoming: list[Any] = []
        self._last_version = 0
        self._supervisor: asyncio.Task | None = None
        self.revived = 0
        self.collective = False
        self.sync_failures = 0  # replicas marked dead during a weight sync

    async def start(self, cfg_json: str, run_root: str, replicas: list[Any] | None = None) -> dict[str, Any]:
        """Serve `replicas` (Ray actor handles of `ReplicaActor`s), or start the engines of `cfg.serving`
        here when None (single-node tests)."""
        from legorl.models.store import resolve_model
        from legorl.runtime.inprocess import engine_spec
        from legorl.runtime.stack import PolicyServer

        cfg = RunConfig.model_validate_json(cfg_json)
        self.collective = cfg.cluster.weight_transport == "collective"
        model_dir = resolve_model(cfg.model.path)
        proxy_config = ProxyConfig.from_section(cfg.serving.proxy, tool_parser=cfg.agent.tool_parser,
                                                host=cfg.cluster.bind_host, port=cfg.cluster.proxy_port)
        partial = cfg.async_training.partial_enabled
        if replicas is None:
            run_dir = RunDir(Path(run_root), cfg.run.name)
            self.server = await PolicyServer.start(engine_spec(cfg, model_dir, run_dir), proxy_config, cfg.serving,
                                                   partial_rollout=partial)
        else:
            from legorl.cluster.replica import RayReplica

            engines = list(await asyncio.gather(*(RayReplica.connect(h) for h in replicas)))
            self.server = await PolicyServer.assemble(engines, model_dir, proxy_config, cfg.serving,
                                                      partial_rollout=partial, pool=True)
            self._supervisor = asyncio.create_task(self._supervise(), name="legorl-gateway-revive")
        manager = self.server.partial.inner if self.server.partial is not None else self.server.manager
        self.pool = getattr(manager, "pool", None)
        return {"url": self.server.proxy.url, "model": self.server.proxy.config.model_name,
                "weight_version": self.weight_version()}

    # -- sessions (sandbox hosts) -------------------------------------------------------------------
    async def open_session(self, metadata: dict[str, Any]) -> dict[str, Any]:
        s = self.server.proxy.open_session(metadata)
        return {"session_id": s.id, "openai_base_url": s.openai_base_url,
                "anthropic_base_url": s.anthropic_base_url, "model": self.server.proxy.config.model_name}

    async def close_session(self, session_id: str, out_dir: str | None = None) -> Any:
        """The session's `SessionRecord` (None when unknown or already closed)."""
        try:
            return await self.server.proxy.close_session(session_id, out_dir=out_dir)
        except KeyError:
            return None

    async def close_host_sessions(self, host: int) -> int:
        """Close the sessions a dead sandbox host opened (its trials will never close them); their in-flight
        generations are aborted. Returns how many were closed."""
        proxy = self.server.proxy
        sids = [sid for sid, s in proxy.sessions.items() if s.metadata.get("sandbox_host") == host]
        for sid in sids:
            with contextlib.suppress(KeyError):
                await proxy.close_session(sid)
        return len(sids)

    # -- weight sync (the driver's `WeightSync` target) ---------------------------------------------
    def weight_version(self) -> int:
        return int(self.server.manager.weight_version)

    async def begin_sync(self) -> None:
        await self._sync_lock.acquire()
        self._sync_cm = self.server.syncing()
        await self._sync_cm.__aenter__()

    async def end_sync(self) -> None:
        cm, self._sync_cm = self._sync_cm, None
        try:
            if cm is not None:
                await cm.__aexit__(None, None, None)
        finally:
            if self._sync_lock.locked():
                self._sync_lock.release()

    async def pause(self, mode: Literal["wait", "abort"], only: list[str] | None = None) -> None:
        if only is None:
            self._incoming = []
        await self._each(lambda e: e.pause(mode), only)

    async def update_weights(self, bucket: Any, version: int, mode: Literal["wait", "abort"],
                             only: list[str] | None = None) -> None:
        """`bucket`: a `RemoteBucket` (its ref is passed on to each replica), a `CollectiveBucket` (the replicas
        among its `peers` receive it over the transfer group) or a dict of tensors. `only`: these replicas (a
        revival), healthy or not; the bucket is not kept for later revivals."""
        from legorl.cluster.collective import CollectiveBucket

        peers = set(bucket.peers) if isinstance(bucket, CollectiveBucket) else None
        if only is None and peers is None:
            self._incoming.append(bucket)
        await self._each(lambda e: e.update_weights(bucket, version, mode), only, peers)
        if only is None:
            self._last_version = int(version)

    async def resume(self, only: list[str] | None = None) -> None:
        await self._each(lambda e: e.resume(), only)
        if only is None and self._incoming:
            self._last = (self._last_version, self._incoming)
            self._incoming = []

    async def _each(self, call: Any, only: list[str] | None = None, peers: set[str] | None = None) -> None:
        """`call(engine)` on every healthy replica (or the replicas `only` names; of those, the ones in `peers`
        when given); one that fails as dead is marked dead, not raised."""
        if only is not None and self.pool is not None:
            engines = [(r.id, r.engine) for r in self.pool.all() if r.id in only]
        else:
            engines = self._targets()
        if peers is not None:
            engines = [(rid, e) for rid, e in engines if rid in peers]
        results = await asyncio.gather(*(call(e) for _, e in engines), return_exceptions=True)
        for (rid, _), res in zip(engines, results, strict=True):
            if isinstance(res, REPLICA_FAILURES) and rid is not None and self.pool is not None:
                if only is not None:
                    raise res  # a revival: the driver gives that replica up for now
                if self.pool.get(rid) is not None and self.pool.get(rid).healthy:
                    self.sync_failures += 1
                self.pool.mark_dead(rid, f"died during a weight sync: {res!r}")
            elif isinstance(res, BaseException):
                raise res

    # -- the weight-transfer group (cluster.weight_transport = "collective") ------------------------------
    async def transfer_targets(self) -> list[str]:
        """The replicas a sync sends to: the healthy ones."""
        return [rid for rid, _ in self._targets() if rid is not None]

    async def join_transfer(self, rid: str, addr: str, port: int, timeout_s: float, backend: str) -> bool:
        """Replica `rid` joins its pair group with trainer rank 0; False (and marked dead) when it cannot."""
        rep = self.pool.get(rid) if self.pool is not None else None
        if rep is None:
            return False
        try:
            await rep.engine.join_transfer(addr, port, timeout_s, backend, rid)
            return True
        except REPLICA_FAILURES as exc:
            self.pool.mark_dead(rid, f"could not join the weight-transfer group: {exc!r}")
            return False

    async def stale_ready(self, timeout_s: float = 0.0) -> list[str]:
        """Dead replicas that answer again (Ray restarted them, or a transfer to them failed) and wait for a
        full sync before they rejoin; waits up to `timeout_s` for ones still restarting."""
        if self.pool is None:
            return []
        deadline = time.monotonic() + timeout_s
        while True:
            ready = []
            for rep in self._down():
                try:
                    await rep.engine.wait_ready(timeout=2.0)
                    rep.meta["dead_answers"] = 0
                    ready.append(rep.id)
                except TimeoutError:
                    rep.meta["dead_answers"] = 0
                except REPLICA_FAILURES:
                    rep.meta["dead_answers"] = rep.meta.get("dead_answers", 0) + 1
            waiting = [r for r in self._down() if r.id not in ready]
            if not waiting or time.monotonic() >= deadline:
                return ready
            await asyncio.sleep(0.2)

    async def rejoin(self, rids: list[str]) -> int:
        """Replicas that got the current weights (a full sync) go back into routing."""
        n = 0
        for rid in rids:
            rep = self.pool.get(rid)
            if rep is not None and not rep.healthy:
                self.pool.mark_healthy(rid)
                self.revived += 1
                n += 1
                log.warning("replica %s rejoined at weight version %s (full sync)", rid, rep.engine.weight_version)
        return n

    # -- replica revival ----------------------------------------------------------------------------
    async def revive(self, timeout_s: float = 0.0) -> int:
        """Bring back dead replicas that answer again (Ray restarted them) with the last synced weights; wait up
        to `timeout_s` for ones still restarting (not for ones Ray will not restart). Returns how many rejoined."""
        if self.pool is None:
            return 0
        deadline = time.monotonic() + timeout_s
        n = 0
        while True:
            for rep in self._down():
                if await self._revive_one(rep):
                    n += 1
            if not self._down() or time.monotonic() >= deadline:
                return n
            await asyncio.sleep(0.2)

    def _down(self) -> list[Any]:
        """Replicas out of routing that may come back (Ray said twice in a row that it will not: gone)."""
        return [r for r in self.pool.all() if not r.healthy and r.meta.get("dead_answers", 0) < 2]

    async def _revive_one(self, rep: Any) -> bool:
        try:
            await rep.engine.wait_ready(timeout=2.0)
        except TimeoutError:  # still restarting
            rep.meta["dead_answers"] = 0
            return False
        except REPLICA_FAILURES:  # Ray will not restart it (asked twice: a restart can look like this briefly)
            rep.meta["dead_answers"] = rep.meta.get("dead_answers", 0) + 1
            return False
        rep.meta["dead_answers"] = 0
        if self.collective and self._last_version > 0:
            return False  # the driver revives it with a full sync over the transfer group (stale_ready)
        async with self._sync_lock:
            try:
                if self._last is not None:
                    version, buckets = self._last
                    await rep.engine.pause("wait")
                    for b in buckets:
                        await rep.engine.update_weights(b, version, "wait")
                    await rep.engine.resume()
            except REPLICA_FAILURES as exc:
                log.warning("replica %s died again while being revived: %r", rep.id, exc)
                return False
            self.pool.mark_healthy(rep.id)
        self.revived += 1
        log.warning("replica %s rejoined at weight version %s", rep.id, rep.engine.weight_version)
        return True

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_POLL_S)
            try:
                await self.revive()
            except Exception:  # never let the supervisor die: replicas would stop coming back
                log.exception("gateway: reviving replicas failed")

    # -- status -------------------------------------------------------------------------------------
    async def partial_counters(self) -> dict[str, int]:
        return self.server.partial_counters()

    async def metrics(self) -> dict[str, float]:
        return {**self.server.metrics(), "cluster/replicas_revived": float(self.revived),
                "cluster/weight_sync_failures": float(self.sync_failures)}

    async def engine_stats(self) -> list[EngineStats]:
        return [e.stats() for _, e in self._targets()]

    def _targets(self) -> list[tuple[str | None, Any]]:
        """The healthy replicas (pool id, engine); without a pool, the engines this process started."""
        if self.pool is None:
            return [(None, e) for e in self.server.engines]
        return [(r.id, r.engine) for r in self.pool.healthy()]

    async def health(self) -> dict[str, Any]:
        reps = self.pool.all() if self.pool is not None else []
        return {"replicas": {r.id: r.healthy for r in reps}, "revived": self.revived,
                "sessions": len(self.server.proxy.sessions),
                "weight_version": self.weight_version(),
                "versions": {r.id: r.engine.weight_version for r in reps}}

    async def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self.server is not None:
            await self.server.close()
            self.server = None
