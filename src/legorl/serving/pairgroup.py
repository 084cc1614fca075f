"""A 2-member process group with a timeout on every operation, and the flat-buffer layout weight buckets
travel in: the pieces the cluster's collective transport (trainer rank 0 -> Ray replicas, cluster/collective.py)
and the vLLM one (trainer -> a vLLM server's worker extension, serving/vllm/transfer.py) share.

Backend: gloo for CPU tensors; NCCL when the sender's tensors are on a GPU (`backend_for`). The NCCL branch is
the same code with another process-group class and CUDA buffers; it cannot run on this machine and is untested.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


class TransferError(RuntimeError):
    """A weight transfer to or from one peer failed (timed out, or the peer's connection closed)."""


def backend_for(device: torch.device | str) -> str:
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


ALIGN = 16  # each tensor starts at a multiple of this in the flat buffer (so its view is aligned for its dtype)


def padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def pack(bucket: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """The bucket as one flat uint8 tensor (its tensors' bytes back to back, each padded to `ALIGN`), with
    their dtypes and shapes."""
    parts = []
    for t in bucket.values():
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
        parts.append(raw)
        if (pad := padded(raw.numel()) - raw.numel()):
            parts.append(torch.zeros(pad, dtype=torch.uint8, device=raw.device))
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
    dtypes = tuple(str(t.dtype).removeprefix("torch.") for t in bucket.values())
    return flat, dtypes, tuple(tuple(t.shape) for t in bucket.values())


def free_port(host: str = "") -> int:
    """A port free on `host` now ("": every interface)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PairGroup:
    """A 2-member process group between the sender (rank 0) and one replica (rank 1), with a timeout on
    every operation. Built on both sides at once: the sender hosts the store (`host`), the replica joins."""

    def __init__(self, pg: Any, rank: int, store: Any, timeout_s: float):
        self.pg, self.rank, self.store, self.timeout_s = pg, rank, store, timeout_s

    @classmethod
    def host(cls, port: int, timeout_s: float, backend: str = "gloo") -> PairGroup:
        """The sender's side; blocks until the replica joined (or `timeout_s` passed)."""
        store = dist.TCPStore("0.0.0.0", port, 2, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return cls(_new_pg(backend, store, 0, timeout_s), 0, store, timeout_s)

    @classmethod
    def join(cls, addr: str, port: int, timeout_s: float, backend: str = "gloo") -> PairGroup:
        """The replica's side; blocks until the sender is there (or `timeout_s` passed)."""
        store = dist.TCPStore(addr, port, 2, False, timedelta(seconds=timeout_s))
        return cls(_new_pg(backend, store, 1, timeout_s), 1, store, timeout_s)

    def send(self, flat: torch.Tensor, tag: int) -> Any:
        return self.pg.send([flat], 1, tag)

    def recv(self, flat: torch.Tensor, tag: int) -> None:
        wait_work(self.pg.recv([flat], 0, tag), self.timeout_s, "receive")

    def close(self) -> None:
        self.pg = self.store = None


def _new_pg(backend: str, store: Any, rank: int, timeout_s: float) -> Any:
    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":  # untested here (no GPU): the same pair, over NCCL
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, 2, opts)
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def wait_work(work: Any, timeout_s: float, what: str) -> None:
    try:
        if not work.wait(timedelta(seconds=timeout_s)):
            raise TransferError(f"weight {what} did not finish within {timeout_s:.0f} s")
    except TransferError:
        raise
    except Exception as exc:  # gloo: timeout or a closed connection
        raise TransferError(f"weight {what} failed: {exc}") from exc
