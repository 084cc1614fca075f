"""An embedded engine in its own process, and the client that makes it an `Engine`.

Why: replicas in separate processes do not share the GIL or the torch thread pool, and one that
crashes (OOM, segfault) takes nothing else down: its pipe closes, every pending call fails with
`ReplicaDiedError` (an `EngineClosedError`), and the pool manager fails over.

Wire format over a `multiprocessing` (spawn) pipe: the client sends `(kind, call_id, args)`; the
child answers `("ok", call_id, value)` or `("err", call_id, (type name, message, attrs))`.
Coroutine methods run as tasks on the child's event loop; the synchronous probes (`kv_cache_usage`,
`prefix_cache_probe`, `stats`) are answered directly by the child's reader thread so they never wait
behind the engine's work. Weights travel as numpy arrays (pickled by value).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any, Literal

from legorl.serving import types as T

log = logging.getLogger(__name__)
SYNC_KINDS = ("kv_cache_usage", "prefix_cache_probe", "stats")


class ReplicaDiedError(T.EngineClosedError):
    """The replica's process exited (or its pipe broke) with the call pending."""


def encode_error(exc: BaseException) -> tuple[str, str, dict[str, Any]]:
    """(type name, message, attrs): plain values (a ContextLengthError does not survive pickle: its __init__
    takes more than its args); also the wire format of `legorl.cluster.replica`."""
    attrs = {k: getattr(exc, k) for k in ("prompt_tokens", "limit") if hasattr(exc, k)}
    return type(exc).__name__, str(exc), attrs


def decode_error(name: str, msg: str, attrs: dict[str, Any]) -> BaseException:
    if name == "ContextLengthError":
        return T.ContextLengthError(msg, attrs.get("prompt_tokens", 0), attrs.get("limit", 0))
    if name == "ReplicaDiedError":
        return ReplicaDiedError(msg)
    cls = getattr(T, name, None)
    if isinstance(cls, type) and issubclass(cls, T.EngineError):
        return cls(msg)
    if name in ("ValueError", "KeyError", "TypeError"):
        return ValueError(msg)  # e.g. a rejected weight update
    return T.EngineError(f"{name}: {msg}")


# -- child side -------------------------------------------------------------------------------------
def _child_main(conn: Any, model: str, kwargs: dict[str, Any]) -> None:
    asyncio.run(_serve(conn, model, kwargs))
    logging.shutdown()
    os._exit(0)  # the engine is closed and the reply sent: skip the slow interpreter teardown


async def _serve(conn: Any, model: str, kwargs: dict[str, Any]) -> None:
    import torch

    from legorl.serving.embedded import EmbeddedEngine

    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with lock:
            conn.send(msg)

    try:
        engine = EmbeddedEngine.from_pretrained(model, **kwargs)
        await engine.start()
    except BaseException as exc:
        send(("fatal", 0, encode_error(exc)))
        return
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()
    send(("ready", 0, {"max_model_len": engine.max_model_len, "weight_version": engine.weight_version,
                       "name": engine.name, "block_size": engine.block_size}))

    def reader() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            kind, call_id, args = msg
            if kind in SYNC_KINDS:
                try:
                    send(("ok", call_id, getattr(engine, kind)(*args)))
                except Exception as exc:
                    send(("err", call_id, encode_error(exc)))
            else:
                loop.call_soon_threadsafe(inbox.put_nowait, msg)

    async def handle(kind: str, call_id: int, args: tuple[Any, ...]) -> None:
        try:
            if kind == "update_weights":
                state, version, mode = args
                args = ({k: torch.from_numpy(v) for k, v in state.items()}, version, mode)
            send(("ok", call_id, await getattr(engine, kind)(*args)))
        except Exception as exc:
            send(("err", call_id, encode_error(exc)))

    threading.Thread(target=reader, name="legorl-replica-reader", daemon=True).start()
    tasks: set[asyncio.Task] = set()
    while (msg := await inbox.get()) is not None:
        kind, call_id, args = msg
        if kind == "close":
            break
        task = asyncio.create_task(handle(kind, call_id, args))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await engine.close()
    if msg is not None:
        send(("ok", msg[1], None))


# -- client side ------------------------------------------------------------------------------------
class ProcessReplica:
    accepts_weight_buckets = True  # forwarded to an EmbeddedEngine, which takes partial updates
    """Client for one engine process. Implements `legorl.serving.types.Engine`."""

    def __init__(self, proc: Any, conn: Any, info: dict[str, Any], probe_timeout_s: float = 2.0):
        self.proc = proc
        self.conn = conn
        self.max_model_len = int(info["max_model_len"])
        self.name = str(info["name"])
        self.block_size = int(info["block_size"])
        self._version = int(info["weight_version"])
        self.probe_timeout_s = probe_timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._send_lock = threading.Lock()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name=f"legorl-replica-{self.name}", daemon=True)
        self._reader.start()

    @classmethod
    async def start(cls, model: str | Path, startup_timeout_s: float = 600.0, **engine_kwargs: Any) -> ProcessReplica:
        return (await cls.start_many(model, 1, startup_timeout_s=startup_timeout_s, **engine_kwargs))[0]

    @classmethod
    async def start_many(
        cls, model: str | Path, n: int, startup_timeout_s: float = 600.0, **engine_kwargs: Any
    ) -> list[ProcessReplica]:
        """Spawn `n` children at once (they load the model in parallel), wait until all are ready."""
        ctx = mp.get_context("spawn")
        started = []
        for i in range(n):
            seed = int(engine_kwargs.get("seed", 0)) + 7919 * i  # distinct sampling streams per replica
            kwargs = {"name": f"replica{i}", **engine_kwargs, "seed": seed}
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_child_main, args=(child, str(model), kwargs), daemon=True)
            proc.start()
            child.close()
            started.append((proc, parent))
        loop = asyncio.get_running_loop()
        out: list[ProcessReplica] = []
        try:
            for proc, parent in started:
                ok = await loop.run_in_executor(None, parent.poll, startup_timeout_s)
                if not ok:
                    raise TimeoutError(f"replica process did not start within {startup_timeout_s}s")
                try:
                    kind, _, payload = parent.recv()
                except EOFError:
                    await loop.run_in_executor(None, proc.join, 5)
                    raise RuntimeError(
                        f"replica process exited during startup (exit code {proc.exitcode}); a script that "
                        "starts replicas needs an `if __name__ == '__main__':` guard (spawn re-imports it)"
                    ) from None
                if kind != "ready":
                    raise decode_error(*payload)
                out.append(cls(proc, parent, payload))
        except BaseException:
            for proc, parent in started:
                parent.close()
                proc.kill()
            raise
        return out

    # -- Engine -----------------------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(self, request: T.GenerateRequest) -> T.TokenOutput:
        try:
            out = await self._call("generate", request)
        except asyncio.CancelledError:
            if not self._closed:
                self._post("abort", request.request_id)
            raise
        return out

    async def prompt_logprobs(self, token_ids: list[int], temperature: float = 1.0) -> list[float | None]:
        return await self._call("prompt_logprobs", list(token_ids), temperature)

    async def abort(self, request_id: str) -> T.TokenOutput | None:
        return await self._call("abort", request_id)

    def kv_cache_usage(self) -> float:
        return float(self._call_sync("kv_cache_usage"))

    def prefix_cache_probe(self, token_ids: list[int]) -> T.PrefixProbe:
        return self._call_sync("prefix_cache_probe", list(token_ids))

    async def update_weights(
        self, state_dict: Mapping[str, Any], version: int, mode: Literal["wait", "abort"] = "wait"
    ) -> None:
        state = {k: v.detach().cpu().numpy() if hasattr(v, "detach") else v for k, v in state_dict.items()}
        await self._call("update_weights", state, version, mode)
        self._version = int(version)

    async def pause(self, mode: Literal["wait", "abort"] = "wait") -> None:
        await self._call("pause", mode)

    async def sleep(self, mode: Literal["wait", "abort"] = "wait") -> None:
        """The child's engine pauses and frees its KV pool until `resume` (EmbeddedEngine.sleep)."""
        await self._call("sleep", mode)

    async def resume(self) -> None:
        await self._call("resume")

    def stats(self) -> T.EngineStats:
        return self._call_sync("stats")

    async def close(self) -> None:
        if not self._closed:
            try:
                await asyncio.wait_for(self._call("close"), 60)
            except (T.EngineClosedError, TimeoutError):
                pass
            self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.proc.join, 10)
        if self.proc.is_alive():
            self.proc.kill()
        self.conn.close()

    def kill(self) -> None:
        """Hard-kill the process (what a crash looks like to the pool)."""
        self.proc.kill()

    # -- plumbing ---------------------------------------------------------------------------------
    def _post(self, kind: str, *args: Any) -> Future:
        fut: Future = Future()
        with self._send_lock:  # registration and the closed check are atomic with the reader's drain
            if self._closed:
                fut.set_exception(T.EngineClosedError(f"replica {self.name} is closed"))
                return fut
            call_id = next(self._ids)
            self._pending[call_id] = fut
            try:
                self.conn.send((kind, call_id, args))
            except (OSError, EOFError, ValueError) as exc:
                self._pending.pop(call_id, None)
                fut.set_exception(ReplicaDiedError(f"replica {self.name}: pipe broken ({exc!r})"))
        return fut

    async def _call(self, kind: str, *args: Any) -> Any:
        return await asyncio.wrap_future(self._post(kind, *args))

    def _call_sync(self, kind: str, *args: Any) -> Any:
        return self._post(kind, *args).result(self.probe_timeout_s)

    def _read(self) -> None:
        while True:
            try:
                status, call_id, payload = self.conn.recv()
            except (EOFError, OSError, ValueError):
                break
            fut = self._pending.pop(call_id, None)
            if fut is not None:
                _settle(fut, payload if status == "ok" else decode_error(*payload))
        with self._send_lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        err = ReplicaDiedError(f"replica {self.name} exited (exit code {self.proc.exitcode})")
        for fut in pending:
            _settle(fut, err)


def _settle(fut: Future, value: Any) -> None:
    """Resolve unless the waiter already gave up (a cancelled future is done)."""
    try:
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)
    except InvalidStateError:
        pass
