"""`trainer.n_ranks = N`: the trainer as N torch.distributed ranks in child processes of `legorl train`.

The driver (the rollout side: engines, proxy, workers) keeps one `Trainer` handle. Every command goes to
every rank over a pipe (each rank takes its share of the batch, FSDP2 shards the model), and rank 0
answers with the metrics. Weights come back from rank 0 bucket by bucket, as tensors in shared memory,
so no process holds a second full copy of the model. A rank that dies or fails fails the step with its
error; a driver killed with -9 closes the pipes and the ranks exit on their own.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from legorl.config.run import RunConfig
from legorl.serving.pairgroup import free_port
from legorl.train.batch import TrainBatch

READY_TIMEOUT_S = 600.0


class RankFailedError(RuntimeError):
    """A trainer rank died or could not start."""


class TrainerRanks:
    def __init__(self, cfg: RunConfig, model_dir: Path, n_ranks: int):
        ctx = mp.get_context("spawn")
        port = free_port("127.0.0.1")
        threads = max(1, (os.cpu_count() or 1) // n_ranks)
        self.procs, self.conns = [], []
        try:
            for rank in range(n_ranks):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_rank_main, name=f"legorl-trainer-rank{rank}", daemon=True,
                                   args=(rank, n_ranks, port, threads, cfg.model_dump_json(), str(model_dir), child))
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
            self.pad_id = int(self._gather(READY_TIMEOUT_S)[0])
        except BaseException:
            self.close()
            raise

    # -- the wire --------------------------------------------------------------------------------
    def _recv(self, rank: int, timeout: float | None = None) -> tuple[str, Any]:
        conn, proc = self.conns[rank], self.procs[rank]
        waited = 0.0
        while not conn.poll(1.0):
            waited += 1.0
            if not proc.is_alive():
                raise RankFailedError(f"trainer rank {rank} died (exit code {proc.exitcode})")
            if timeout is not None and waited >= timeout:
                raise RankFailedError(f"trainer rank {rank} did not answer within {timeout:.0f} s")
        try:
            return conn.recv()
        except EOFError:
            raise RankFailedError(f"trainer rank {rank} died (exit code {proc.exitcode})") from None

    def _gather(self, timeout: float | None = None) -> list[Any]:
        """Every rank's answer to the last command; the first error is raised (and a rank that does not
        answer after another failed is stopped, since it waits in a collective that cannot finish)."""
        out, error = [], None
        for rank in range(len(self.procs)):
            try:
                kind, value = self._recv(rank, timeout if error is None else 30.0)
            except RankFailedError as exc:
                error = error or exc
                self.close()
                break
            if kind == "error":
                error = error or value
            out.append(value)
        if error is not None:
            raise error
        return out

    def _send(self, command: str, *args: Any) -> None:
        for rank, conn in enumerate(self.conns):
            try:
                conn.send((command, args))
            except (BrokenPipeError, OSError):
                raise RankFailedError(f"trainer rank {rank} is gone (exit code {self.procs[rank].exitcode})") from None

    def _call(self, command: str, *args: Any) -> Any:
        self._send(command, *args)
        return self._gather()[0]

    # -- Trainer ---------------------------------------------------------------------------------
    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self._call("update", batch)

    def stream_weights(self, emit: Callable[[dict[str, torch.Tensor]], None]) -> int:
        self._send("stream")
        while (msg := self._recv(0))[0] == "bucket":
            emit(msg[1])
        answers = [msg, *(self._recv(rank) for rank in range(1, len(self.procs)))]
        for kind, value in answers:
            if kind == "error":
                raise value
        return int(msg[1])

    def save(self, directory: Path) -> None:
        self._call("save", str(directory))

    def load(self, directory: Path) -> None:
        self._call("load", str(directory))

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop", ()))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []


def setup_rank(rank: int, n_ranks: int, cfg_json: str, model_dir: str, *, local_rank: int, master_addr: str,
               port: int, threads: int):
    """Join the trainer's process group as `rank` and build this rank's (sharded) StepTrainer. Shared by the
    child processes here and the Ray rank actors (legorl.cluster.trainer), so both set a rank up alike."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(n_ranks),
                      MASTER_ADDR=master_addr, MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    from legorl.train.build import build_trainer
    from legorl.train.fsdp import init_distributed

    init_distributed()
    cfg = RunConfig.model_validate_json(cfg_json)
    torch.manual_seed(cfg.run.seed)
    return build_trainer(cfg, Path(model_dir))


def run_command(trainer, command: str, args: tuple, emit: Callable[[dict[str, torch.Tensor]], None]) -> Any:
    """One driver command on this rank (every rank runs each one: they are collectives under FSDP2)."""
    if command == "update":
        return trainer.update(*args)
    if command == "stream":
        return trainer.stream_weights(emit)
    if command == "save":
        return trainer.save(Path(args[0]))
    if command == "load":
        return trainer.load(Path(args[0]))
    raise ValueError(f"unknown trainer command {command!r}")


def leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _rank_main(rank: int, n_ranks: int, port: int, threads: int, cfg_json: str, model_dir: str, conn) -> None:
    """One trainer rank: join the group, build the sharded trainer, serve the driver's commands."""

    def send_error(exc: BaseException) -> None:
        try:
            conn.send(("error", exc))
        except Exception:  # an exception that does not pickle: its text
            conn.send(("error", RuntimeError(f"trainer rank {rank}: {''.join(traceback.format_exception(exc))}")))

    try:
        trainer = setup_rank(rank, n_ranks, cfg_json, model_dir, local_rank=rank, master_addr="127.0.0.1",
                             port=port, threads=threads)
        conn.send(("ok", trainer.pad_id))
    except BaseException as exc:
        send_error(exc)
        return
    try:
        while True:
            try:
                command, args = conn.recv()
            except EOFError:  # the driver is gone
                break
            if command == "stop":
                break
            try:
                conn.send(("ok", run_command(trainer, command, args, lambda bucket: conn.send(("bucket", bucket)))))
            except Exception as exc:
                send_error(exc)
    finally:
        leave_group()
