"""Weight sync to a vLLM server over a process group (`serving.vllm.weight_transport = "collective"`), no files.

The trainer's end of one server's pair group (world size 2: this process rank 0 hosts the TCPStore, the server's
worker rank 1 joins through `worker_ext.WeightReceiver.legorl_join`), the same pair, packing and timeouts as the
cluster's collective transport (`legorl.cluster.collective`). A sync posts `/collective_rpc legorl_receive` with
the buckets' layouts (names, dtypes, shapes, bytes) and, concurrently, sends each packed bucket from a thread (the
event loop keeps serving other sessions); the worker feeds the bytes to vLLM's own in-place reload. Every step
is bounded by `timeout_s`: forming the pair, each bucket's send and receive, and the RPC as a whole.

Failure (a timeout, the server dying, an error in the worker): `CollectiveSyncError` (an `EngineError`), the
pair is dropped and `fallback` is set, so the engine refuses calls (the replica may hold a mix of versions: it
never serves it) and its next sync is a full reload from files; the pair is formed again at the sync after that
(also after a server restart).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import torch

from legorl.serving.pairgroup import PairGroup, TransferError, backend_for, free_port, pack, padded, wait_work
from legorl.serving.types import EngineError, InvalidRequestError

log = logging.getLogger(__name__)

EXTENSION_MODULE = "legorl_vllm_worker_ext"  # worker_ext.py under this name, alone in its directory
EXTENSION_CLS = f"{EXTENSION_MODULE}.WeightReceiver"
DEFAULT_BUCKET_BYTES = 256 << 20


class CollectiveSyncError(EngineError):
    """A collective weight sync failed or timed out; the replica waits for a full reload from files."""


def extension_dir(root: Path | None = None) -> Path:
    """A directory holding only the worker extension (as `legorl_vllm_worker_ext.py`), for the server's
    PYTHONPATH: the trainer's own path never reaches vLLM's venv."""
    d = Path(tempfile.mkdtemp(prefix="legorl-vllm-ext-", dir=root))
    shutil.copyfile(Path(__file__).with_name("worker_ext.py"), d / f"{EXTENSION_MODULE}.py")
    return d


def plan_buckets(state_dict: Mapping[str, torch.Tensor], bucket_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Consecutive tensors grouped up to `bucket_bytes` (a bigger tensor goes alone)."""
    buckets: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state_dict.items():
        n = t.numel() * t.element_size()
        if buckets[-1] and size + n > bucket_bytes:
            buckets.append({})
            size = 0
        buckets[-1][name] = t
        size += n
    return [b for b in buckets if b]


def bucket_layout(seq: int, bucket: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What the worker needs to receive a bucket `pack` writes (JSON for `/collective_rpc`)."""
    return {"seq": seq, "names": list(bucket), "nbytes": sum(padded(t.numel() * t.element_size())
                                                              for t in bucket.values()),
            "dtypes": [str(t.dtype).removeprefix("torch.") for t in bucket.values()],
            "shapes": [list(t.shape) for t in bucket.values()]}


class CollectiveTransport:
    """One vLLM server's pair group and the syncs over it. `engine` supplies `url` and `start()`/`_session`."""

    def __init__(self, engine: Any, timeout_s: float = 60.0, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 host: str = "127.0.0.1"):
        self.engine, self.timeout_s, self.bucket_bytes, self.host = engine, float(timeout_s), bucket_bytes, host
        self.pair: PairGroup | None = None
        self.backend = "gloo"
        self.fallback = False  # the last sync failed: the next one reloads the whole model from files
        self.last_seconds = 0.0
        self.last_bytes = 0
        self.syncs = self.failures = 0
        self.last_worker: dict[str, float] = {}

    def reset(self) -> None:
        """Forget the pair (the server restarted, or a sync broke it): the next sync forms a new one."""
        if self.pair is not None:
            self.pair.close()
        self.pair = None

    def check_restorable(self, state_dict: Mapping[str, Any], shapes: Mapping[str, Any], tied: bool) -> None:
        """After a failed sync only a full state dict (by files) makes the replica whole again."""
        missing = [n for n in shapes if n not in state_dict and not (tied and n == "lm_head.weight")]
        if self.fallback and missing:
            raise InvalidRequestError(f"{self.engine.name} lost its weights in a failed sync: only a full state "
                                      f"dict restores it ({len(missing)} missing, e.g. {missing[0]})")

    def restarted(self, latest: tuple[int, Path] | None, version: int) -> bool:
        """The server restarted: a new pair at the next sync. True when the weights of `version` are not on disk
        (they went over the wire): the replica then serves nothing until the next sync, a full files reload."""
        self.reset()
        if latest[0] == version if latest is not None else version == 0:
            return False
        self.fallback = True
        return True

    async def push(self, state_dict: Mapping[str, torch.Tensor], tied: bool) -> None:
        """Send every tensor of `state_dict` (CPU tensors: gloo; CUDA: NCCL) into the server's model."""
        t0 = time.perf_counter()
        try:
            backend = backend_for(_device(state_dict))  # CPU tensors: gloo; CUDA: NCCL (untested)
            if self.pair is None or backend != self.backend:
                self.reset()
                await self._form(backend)
                self.backend = backend
            tensors = dict(state_dict)
            if tied and "model.embed_tokens.weight" in tensors:  # as the files path writes it (weights.py)
                tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
            buckets = plan_buckets({n: t.detach() for n, t in tensors.items()}, self.bucket_bytes)
            nbytes = await self._transfer(buckets)
        except BaseException as exc:
            self.reset()
            self.fallback, self.failures = True, self.failures + 1
            if isinstance(exc, CollectiveSyncError):
                raise
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise CollectiveSyncError(f"collective weight sync to {self.engine.url} failed: {exc!r}") from exc
        self.syncs += 1
        self.last_seconds, self.last_bytes = time.perf_counter() - t0, nbytes

    async def _form(self, backend: str) -> None:
        port = free_port()
        hosting = asyncio.ensure_future(asyncio.to_thread(PairGroup.host, port, self.timeout_s, backend))
        try:
            await self._rpc("legorl_join", {"host": self.host, "port": port, "timeout_s": self.timeout_s,
                                            "backend": backend}, self.timeout_s)
            self.pair = await asyncio.wait_for(asyncio.shield(hosting), self.timeout_s + 5)
        finally:
            if not hosting.done():  # the host thread ends at its own store timeout
                hosting.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _transfer(self, buckets: list[dict[str, torch.Tensor]]) -> int:
        layouts = [bucket_layout(seq, b) for seq, b in enumerate(buckets)]
        budget = self.timeout_s * (len(buckets) + 1)
        rpc = asyncio.ensure_future(self._rpc("legorl_receive", {"buckets": layouts, "timeout_s": self.timeout_s},
                                              budget))
        send = asyncio.ensure_future(asyncio.to_thread(self._send_all, buckets))
        self.last_worker = {}
        try:
            done, _ = await asyncio.wait({rpc, send}, timeout=budget + 10, return_when=asyncio.FIRST_EXCEPTION)
            for f in done:
                f.result()  # the first failure, at once
            if not (rpc.done() and send.done()):
                await asyncio.wait_for(asyncio.gather(rpc, send), budget + 10)
            self.last_worker = (rpc.result() or [{}])[0]  # the worker's own timings (legorl_receive)
        finally:
            rpc.cancel()
            if not send.done():  # the thread's sends end at their own timeout
                send.add_done_callback(lambda f: f.cancelled() or f.exception())
        return int(send.result())

    def _send_all(self, buckets: list[dict[str, torch.Tensor]]) -> int:
        total = 0
        for seq, b in enumerate(buckets):
            flat, _, _ = pack(b)
            self.send_bucket(flat, seq)
            total += flat.numel()
        return total

    def send_bucket(self, flat: torch.Tensor, seq: int) -> None:
        pair = self.pair
        if pair is None:
            raise TransferError("the weight-transfer pair was dropped")
        wait_work(pair.send(flat, seq), self.timeout_s, f"send of bucket {seq}")

    async def _rpc(self, method: str, kwargs: dict[str, Any], timeout_s: float) -> Any:
        await self.engine.start()
        body = {"method": method, "kwargs": kwargs, "timeout": timeout_s}
        try:
            async with self.engine._session.post(self.engine.url + "/collective_rpc", json=body,
                                                 timeout=aiohttp.ClientTimeout(total=timeout_s + 5)) as r:
                text = await r.text()
                if r.status >= 400:
                    raise CollectiveSyncError(f"{method} failed in the vLLM worker ({r.status}): {text[:500]} "
                                              "(is the server started with the legorl worker extension?)")
                return (await r.json(content_type=None) or {}).get("results")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise CollectiveSyncError(f"{method} to {self.engine.url}: no answer ({exc!r})") from exc

    async def checksums(self) -> dict[str, str]:
        """sha256 per served parameter, read in the worker (tests, benchmarks)."""
        return (await self._rpc("legorl_checksum", {}, 300.0))[0]


def _device(state_dict: Mapping[str, torch.Tensor]) -> torch.device:
    for t in state_dict.values():
        return t.device
    return torch.device("cpu")
