"""`cluster.runtime = "ray"`: the trainer's N torch.distributed ranks as Ray actors (the Ray twin of
`legorl.train.ranks.TrainerRanks`, sharing its rank-side setup and commands).

The driver keeps one `Trainer` handle (`RayTrainer`). Each rank is a `TrainerRankActor` placed by the
`cluster.trainer` role; rank 0's node is the group's master (gloo on CPU, NCCL on GPU, FSDP2 shards).
A batch goes into the object store once and every rank fetches it from there. Weights stay out of the
driver: rank 0 puts each bucket into the object store as FSDP2 gathers it and hands back
`RemoteBucket`s (a streaming generator, so bucket k travels while k+1 is gathered); the weight sync
passes the refs on to the replicas. Rank 0 owns those objects: they live as long as a ref to them does
and rank 0 is up (a replica must have taken a bucket before the trainer is closed).

Faults: a rank that dies (or does not answer after another failed: it waits in a collective that cannot
finish) fails the call with `RankFailedError` and the whole group is killed, as TrainerRanks does. An
error that every rank raised alike (e.g. all refused a batch: `LogprobMismatchError`) leaves the group
intact and is re-raised as its own type, noting the rank, so the CLI's exit codes stay what they are.

Checkpoints have TrainerRanks' layout (`dcp/` shards from every rank, HF weight shards and `optim.pt`
from rank 0) and are written by the ranks themselves into the run's checkpoint directory: on more than
one node that directory must be on a filesystem every node shares (NFS, a mounted bucket). Across nodes
gloo must reach rank 0's node IP (set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME if the hosts have
several interfaces).
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from legorl.cluster.placement import RolePlacement, import_ray
from legorl.config.run import RunConfig
from legorl.serving.weight_sync import RemoteBucket
from legorl.train.batch import TrainBatch
from legorl.train.ranks import READY_TIMEOUT_S, RankFailedError, leave_group, run_command, setup_rank

STRAGGLER_TIMEOUT_S = 30.0  # how long the other ranks get to answer once one rank failed
CLOSE_TIMEOUT_S = 10.0  # a graceful close (leave the process group) before the actors are killed
BUCKETS_AHEAD = 2  # buckets rank 0 may have in the object store before the driver took them


class TrainerRankActor:
    """One trainer rank, run as a Ray actor (`ray.remote(**placement.options(rank))(TrainerRankActor)`)."""

    def __init__(self, rank: int, world_size: int, cfg_json: str, model_dir: str):
        self.rank, self.world_size = rank, world_size
        self.cfg_json, self.model_dir = cfg_json, str(model_dir)
        self.trainer: Any = None
        self.sender: Any = None  # cluster.collective.Sender on rank 0, with cluster.weight_transport="collective"
        self.wire_dtype: Any = None  # the dtype floating-point weights are sent in (None: the trainer's)

    def node(self) -> tuple[str, int, int]:
        """(node IP, CPUs of the machine, pid): the driver counts ranks per host for LOCAL_RANK and threads."""
        import ray

        return ray.util.get_node_ip_address(), os.cpu_count() or 1, os.getpid()

    def address(self) -> tuple[str, int]:
        """(this node's IP, a free port on it): the group's MASTER_ADDR/PORT when asked of rank 0."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, master_addr: str, port: int, threads: int, local_rank: int = 0) -> int:
        """Join the group and build the sharded trainer; returns the pad id."""
        self.trainer = setup_rank(self.rank, self.world_size, self.cfg_json, self.model_dir, local_rank=local_rank,
                                  master_addr=master_addr, port=port, threads=threads)
        return int(self.trainer.pad_id)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return run_command(self.trainer, "update", (batch,), _no_emit)

    # -- the weight-transfer group (rank 0, cluster.weight_transport = "collective") ----------------------
    def _sender(self) -> Any:
        if self.sender is None:
            import torch

            from legorl.cluster.collective import Sender
            from legorl.serving.pairgroup import backend_for

            cfg = RunConfig.model_validate_json(self.cfg_json)
            device = "cuda" if cfg.trainer.device != "cpu" and torch.cuda.is_available() else "cpu"
            self.sender = Sender(cfg.cluster.weight_sync_timeout_s, backend_for(device), cfg.cluster.weight_delta)
            # deltas go in the replicas' dtype: they rebuild each bucket from their own weights (a bf16 serving
            # copy of the fp32 master weights; the cast is the one the engine's copy would do)
            self.wire_dtype = getattr(torch, cfg.serving.dtype) if cfg.cluster.weight_delta else None
        return self.sender

    def open_peer(self, peer: str) -> tuple[str, int]:
        """(this node's IP, port) where replica `peer` joins its pair group; `finish_peer` waits for it."""
        import ray

        return ray.util.get_node_ip_address(), self._sender().open(peer)

    def finish_peer(self, peer: str) -> None:
        self._sender().finish(peer)

    def transfer_peers(self) -> list[str]:
        return sorted(self._sender().peers)

    def export_weights(self, peers: tuple[str, ...] | None = None) -> Iterator[RemoteBucket]:
        """Every rank gathers the full weights with the others; rank 0 yields each bucket as a RemoteBucket
        (put into the object store as soon as it is gathered), the other ranks yield nothing. With `peers`
        (the collective transport) rank 0 yields each bucket's layout instead and sends its bytes to those
        replicas' pair groups, one bucket on the wire while the next is gathered."""
        if self.rank != 0:
            run_command(self.trainer, "stream", (), _no_emit)
            return
        import ray
        import torch

        out: queue.Queue = queue.Queue()
        done = object()
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        wire = _Wire(self._sender(), peers, out, self.wire_dtype) if peers is not None else None

        def emit(bucket: dict[str, torch.Tensor]) -> None:
            if wire is not None:
                wire.put(bucket)
                return
            nbytes = sum(v.numel() * v.element_size() for v in bucket.values())
            out.put(RemoteBucket(ray.put(bucket), nbytes, tuple(bucket)))

        def produce() -> None:  # in a thread: the gather goes on while the generator hands out the last bucket
            try:
                if device is not None:
                    torch.cuda.set_device(device)
                run_command(self.trainer, "stream", (), emit)
                if wire is not None:
                    wire.close()
                out.put(done)
            except BaseException as exc:
                out.put(exc)

        threading.Thread(target=produce, name="export-weights", daemon=True).start()
        while (item := out.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item

    def save(self, directory: str) -> None:
        run_command(self.trainer, "save", (directory,), _no_emit)

    def load(self, directory: str) -> None:
        run_command(self.trainer, "load", (directory,), _no_emit)

    def close(self) -> None:
        """Leave the process group (the actor itself is killed by the driver)."""
        leave_group()
        self.trainer = None


class _Wire:
    """Rank 0's send side of one collective export: `put(bucket)` hands the bucket's layout to the driver (the
    replicas post their receive when it reaches them) and queues its bytes for the sender thread, which sends
    one bucket while the gather produces the next (at most one more waits). With deltas (`sender.delta`) the
    replicas holding the last version get only what changed (cluster/delta.py), the others the whole bucket."""

    def __init__(self, sender: Any, peers: tuple[str, ...], out: queue.Queue, dtype: Any = None):
        from legorl.cluster.collective import CollectiveBucket
        from legorl.serving.pairgroup import pack

        self.sender, self.peers, self.out, self.dtype = sender, tuple(peers), out, dtype
        self._pack, self._meta = pack, CollectiveBucket
        self._q: queue.Queue = queue.Queue(maxsize=1)
        self._seq = 0
        if sender.delta is not None:
            sender.delta.begin()
        self._thread = threading.Thread(target=self._run, name="weight-wire", daemon=True)
        self._thread.start()

    def put(self, bucket: dict[str, Any]) -> None:
        if self.dtype is not None:
            bucket = {k: v.to(self.dtype) if v.is_floating_point() else v for k, v in bucket.items()}
        flat, dtypes, shapes = self._pack(bucket)
        live = tuple(p for p in self.peers if p in self.sender.peers)
        names, seq, full_n = tuple(bucket), self._seq, int(flat.numel())
        meta = self._meta(None, full_n, names, seq, dtypes, shapes, live, full_nbytes=full_n)
        sends = [(flat, live)]
        base = self.sender.delta
        if base is not None:
            based = tuple(p for p in live if p in base.holders)
            delta = base.encode(seq, names, flat, bool(based))
            if delta is not None:
                whole = tuple(p for p in live if p not in based)
                meta = self._meta(None, int(delta.payload.numel()), names, seq, dtypes, shapes, live,
                                  full_nbytes=full_n, delta=delta.kind, delta_peers=based,
                                  delta_nbytes=int(delta.payload.numel()), changed=delta.changed,
                                  checksum=delta.checksum)
                sends = [(flat, whole), (delta.payload, based)]
        if self.sender.backend == "nccl":  # untested here (no GPU): NCCL sends device buffers
            sends = [(t.cuda(), ps) for t, ps in sends]
        self.out.put(meta)
        self._q.put((seq, sends))
        self._seq += 1

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            seq, sends = item
            self.sender.send_each(seq, sends)  # a failing peer is dropped, never raised

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
        if self.sender.delta is not None:  # the replicas that got every bucket hold this version now
            self.sender.delta.finish(p for p in self.peers if p in self.sender.peers)


def _no_emit(_bucket: Any) -> None:
    """What the ranks other than 0 do with a gathered bucket: nothing (rank 0 alone hands them out)."""


def _threads(role_cpus: float, host_cpus: int, ranks_on_host: int) -> int:
    """Torch threads of a rank: the CPUs its role reserves, else its share of the host's cores (ranks on one
    host would otherwise each start a thread per core and oversubscribe it)."""
    if role_cpus > 0:
        return max(1, int(role_cpus))
    return max(1, host_cpus // ranks_on_host)


class RayTrainer:
    """The `Trainer` of a run whose ranks are Ray actors. Each call blocks until every rank answered, as
    TrainerRanks' do (the loop calls the Trainer synchronously)."""

    def __init__(self, cfg: RunConfig, model_dir: Path, n_ranks: int | None = None):
        self.ray = ray = import_ray()
        if not ray.is_initialized():
            raise RuntimeError("RayTrainer needs a connected Ray (legorl.cluster.placement.connect)")
        n = n_ranks or cfg.trainer.n_ranks
        self.actors: list[Any] = []
        self.collective_peers: tuple[str, ...] | None = None  # set by RayRuntime per sync (collective transport)
        self.placement = RolePlacement.reserve("trainer", cfg.cluster.trainer, n)
        try:
            cls = ray.remote(TrainerRankActor)
            for rank in range(n):
                opts = self.placement.options(rank, max_restarts=0)
                self.actors.append(cls.options(**opts).remote(rank, n, cfg.model_dump_json(), str(model_dir)))
            nodes = self._all([a.node.remote() for a in self.actors], "start", READY_TIMEOUT_S)
            self.pids = [pid for _, _, pid in nodes]
            master, port = self._all([self.actors[0].address.remote()], "start", READY_TIMEOUT_S)[0]
            setups = []
            for rank, (ip, cpus, _) in enumerate(nodes):
                same_host = [r for r, (other, _, _) in enumerate(nodes) if other == ip]
                threads = _threads(cfg.cluster.trainer.num_cpus, cpus, len(same_host))
                setups.append(self.actors[rank].setup.remote(master, port, threads, same_host.index(rank)))
            self.pad_id = int(self._all(setups, "setup", READY_TIMEOUT_S)[0])
        except BaseException:
            self.close()
            raise

    # -- waiting on the ranks ------------------------------------------------------------------------
    def _kill(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        self.actors = []
        self.placement.release()

    def _fail(self, message: str, cause: BaseException | None = None) -> RankFailedError:
        """Kill the group (its survivors wait in collectives that cannot finish) and say what happened."""
        self._kill()
        err = RankFailedError(message)
        err.__cause__ = cause
        return err

    def _result(self, ref: Any, rank: int, what: str) -> tuple[Any, BaseException | None]:
        """(value, None), or (None, the error the rank raised); a dead rank fails the group."""
        ray = self.ray
        try:
            return ray.get(ref), None
        except ray.exceptions.RayActorError as exc:
            raise self._fail(f"trainer rank {rank} died during {what}: {exc}", exc) from exc
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return None, cause

    def _all(self, calls: list[Any], what: str, timeout: float | None = None,
             on_item: Callable[[Any], None] | None = None) -> list[Any]:
        """Every rank's answer: calls[i] is rank i's ObjectRef, or its streaming generator (then rank 0's
        items go to `on_item`, and the end of each stream is its answer). The first error raised on a rank is
        re-raised once all answered (one raised by `on_item` after that); a rank that is dead, or silent past
        `timeout` (STRAGGLER_TIMEOUT_S once another failed), fails the group with RankFailedError."""
        if not self.actors:
            raise RankFailedError("the trainer ranks are gone (a rank failed or the trainer was closed)")
        ray = self.ray
        pending = dict(enumerate(calls))
        owner = {id(call): rank for rank, call in pending.items()}
        results: list[Any] = [None] * len(calls)
        error: tuple[int, BaseException] | None = None
        emit_error: BaseException | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            ready, _ = ray.wait(list(pending.values()), num_returns=1, timeout=1.0)
            for call in ready:
                rank = owner[id(call)]
                if isinstance(call, ray.ObjectRefGenerator):
                    try:
                        ref = next(call)
                    except StopIteration:
                        del pending[rank]
                        continue
                    value, exc = self._result(ref, rank, what)
                    if exc is None and rank == 0 and on_item is not None and error is None and emit_error is None:
                        try:
                            on_item(value)
                        except BaseException as e:  # keep draining: the ranks must finish the gather
                            emit_error = e
                else:
                    del pending[rank]
                    results[rank], exc = self._result(call, rank, what)
                if exc is not None and error is None:
                    error = (rank, exc)
                    deadline = time.monotonic() + STRAGGLER_TIMEOUT_S
            if not ready and deadline is not None and time.monotonic() > deadline:
                silent = sorted(pending)
                if error is not None:
                    raise self._fail(f"trainer rank {error[0]} failed during {what} ({error[1]!r}) and rank(s) "
                                     f"{silent} did not answer within {STRAGGLER_TIMEOUT_S:.0f} s", error[1])
                raise self._fail(f"trainer rank(s) {silent} did not answer {what} within {timeout:.0f} s")
        if error is not None:
            rank, exc = error
            exc.add_note(f"(on trainer rank {rank} of {len(calls)}, during {what})")
            raise exc
        if emit_error is not None:
            raise emit_error
        return results

    # -- Trainer ----------------------------------------------------------------------------------------
    def update(self, batch: TrainBatch) -> dict[str, float]:
        ref = self.ray.put(batch)  # once: each rank fetches it from the object store
        return self._all([a.update.remote(ref) for a in self.actors], "update")[0]

    def stream_weights(self, emit: Callable[[RemoteBucket], None]) -> int:
        """Rank 0's buckets to `emit` as they are gathered (refs: the tensors never reach the driver);
        returns the bytes. An `emit` that raises stops the handing out, not the gather (re-raised after)."""
        total = 0

        def take(bucket: RemoteBucket) -> None:
            nonlocal total
            total += bucket.nbytes
            emit(bucket)

        peers = self.collective_peers
        gens = [a.export_weights.options(num_returns="streaming",
                                         _generator_backpressure_num_objects=BUCKETS_AHEAD).remote(peers)
                for a in self.actors]
        self._all(gens, "the weight export", on_item=take)
        return total

    def save(self, directory: Path) -> None:
        self._all([a.save.remote(str(directory)) for a in self.actors], "save")

    def load(self, directory: Path) -> None:
        self._all([a.load.remote(str(directory)) for a in self.actors], "load")

    def close(self) -> None:
        """Leave the process group gracefully where the ranks answer, then kill the actors and free their
        placement group. Idempotent."""
        if self.actors:
            try:
                refs = [a.close.remote() for a in self.actors]
                self.ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # a dead rank: killed below all the same
                pass
        self._kill()
