"""A LoRA run on vLLM: the server applies the adapter itself (`--enable-lora`, adapters loaded at run time).

The server starts with `--enable-lora --max-lora-rank R --max-loras 1` and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` (which opens `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`).
Its CPU build applies adapters with `PunicaWrapperCPU`. A weight sync of a LoRA run carries the adapter only, in
the wire format of `serving/adapter.py`. Each version is handled the same way:

1. its tensors are checked against the served checkpoint (modules, shapes, a rank the server accepts);
2. it is written once, however many replicas there are, as a PEFT directory `lora-v<version>` under the run's
   weights directory (`write_peft_adapter`, the format `legorl export` writes);
3. each replica loads it under a name of its own, `<prefix>-v<version>`;
4. only after vLLM accepted the load do requests name the new adapter (the request `model` field);
5. the previous adapter is then unloaded.

Any failure raises `EngineError` and the replica keeps serving the version it had: a replica never serves the
base, or the old adapter, while reporting the new version. A server restarted after a crash gets the current
adapter back before it serves a request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from legorl.serving.adapter import is_adapter_update, split_adapter, write_peft_adapter
from legorl.serving.types import EngineError, InvalidRequestError

log = logging.getLogger(__name__)

# the ranks vLLM's `--max-lora-rank` accepts (vllm/config/lora.py, MaxLoRARanks, vLLM 0.32)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}

Post = Callable[[str, "dict[str, Any] | None"], Awaitable[dict[str, Any]]]


def max_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that holds an adapter of `rank`."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"model.lora.rank={rank}: vLLM serves adapters up to rank {VLLM_LORA_RANKS[-1]}")


def lora_server_args(rank: int) -> list[str]:
    """`vllm serve` arguments for a run whose adapter has `rank`: one adapter in a batch, loaded at run time."""
    return ["--enable-lora", "--max-lora-rank", str(max_lora_rank(rank)), "--max-loras", "1"]


def refuse_adapter_update(state_dict: Mapping[str, Any]) -> None:
    """An engine serving the base alone must not take an adapter (it would serve the base and look synced)."""
    if is_adapter_update(state_dict):
        raise InvalidRequestError("a LoRA adapter update needs a vLLM server started with --enable-lora "
                                  "(model.lora.rank > 0)")


def check_adapter(state_dict: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], max_rank: int) -> None:
    """Refuse an adapter the server would not apply as the trainer does: a module the served model lacks, A or B
    of the wrong shape, a rank above the server's `--max-lora-rank`, or several ranks or scalings."""
    if not is_adapter_update(state_dict):
        raise InvalidRequestError("this vLLM engine serves a LoRA adapter (model.lora.rank > 0): it takes adapter "
                                  "updates, not base weights")
    try:
        mods = split_adapter(state_dict)
    except ValueError as e:
        raise InvalidRequestError(str(e)) from e
    problems = []
    ranks = {int(p["A"].shape[0]) for p in mods.values()}
    scalings = {round(float(p["scaling"]), 6) for p in mods.values()}
    if len(ranks) > 1 or len(scalings) > 1:
        problems.append(f"one rank and one scaling for every module (got ranks {sorted(ranks)}, scalings "
                        f"{sorted(scalings)})")
    if ranks and max(ranks) > max_rank:
        problems.append(f"rank {max(ranks)} is above the server's --max-lora-rank {max_rank}")
    for module, p in mods.items():
        w = shapes.get(module + ".weight")
        if w is None or len(w) != 2:
            problems.append(f"{module} is not a Linear of the served model")
            continue
        r = int(p["A"].shape[0])
        if tuple(p["A"].shape) != (r, w[1]) or tuple(p["B"].shape) != (w[0], r):
            problems.append(f"{module}: A {tuple(p['A'].shape)} / B {tuple(p['B'].shape)} do not fit its weight "
                            f"{tuple(w)}")
    if problems:
        raise InvalidRequestError("LoRA adapter refused: " + "; ".join(problems[:5]))


class AdapterExporter:
    """Writes each adapter version once as a PEFT directory `lora-v<version>` under `root` (the replicas of a run
    share one, next to the full-weight exporter's files). The newest two versions stay on disk: a replica whose
    load of the newest failed still serves the one before, and must find it again if its server restarts."""

    def __init__(self, root: Path | None = None, base_model: str = ""):
        self._owned = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="legorl-lora-"))
        self.base_model = base_model
        self._lock = asyncio.Lock()
        self._written: list[tuple[int, Path]] = []

    async def export(self, state_dict: Mapping[str, Any], version: int) -> Path:
        async with self._lock:
            for v, path in self._written:
                if v == version:
                    return path
            path = self.root / f"lora-v{version}"
            await asyncio.to_thread(self._write, state_dict, path)
            self._written.append((version, path))
            for _, old in self._written[:-2]:
                shutil.rmtree(old, ignore_errors=True)
            self._written = self._written[-2:]
            return path

    def _write(self, state_dict: Mapping[str, Any], path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_peft_adapter(state_dict, tmp, self.base_model)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


class VLLMLora:
    """The adapter one vLLM replica serves. `model` is what its requests name: the base until an adapter loaded,
    then the newest adapter the server accepted."""

    def __init__(self, rank: int, exporter: AdapterExporter | None = None, prefix: str = "policy"):
        self.rank = rank
        self.max_rank = max_lora_rank(rank)
        self.prefix = prefix
        self._owns_exporter = exporter is None
        self.exporter = exporter or AdapterExporter()
        self.current: tuple[str, Path, int] | None = None  # (name in the server, directory, weight version)
        self._loads = itertools.count(1)

    def model(self, base: str) -> str:
        return self.current[0] if self.current else base

    async def export(self, state_dict: Mapping[str, Any], version: int,
                     shapes: Mapping[str, tuple[int, ...]]) -> Path:
        check_adapter(state_dict, shapes, self.max_rank)
        return await self.exporter.export(state_dict, version)

    async def load(self, post: Post, path: Path, version: int) -> None:
        """Load `path` into the server under a new name, switch requests to it, then unload the previous one."""
        name = f"{self.prefix}-v{version}"
        if self.current and self.current[0] == name:  # the same version pushed again: a name the server lacks
            name = f"{name}.{next(self._loads)}"
        await self._load(post, name, path, version)
        old, self.current = self.current, (name, path, version)
        if old is not None:
            try:
                await post("/v1/unload_lora_adapter", {"lora_name": old[0]})
            except EngineError as e:  # the new adapter serves; the old one is only listed
                log.warning("vLLM kept the old LoRA adapter %s listed: %s", old[0], e)

    async def restore(self, post: Post) -> None:
        """A restarted server holds no adapter: load the current one again under its name."""
        if self.current is None:
            return
        name, path, version = self.current
        if not path.is_dir():
            raise EngineError(f"the LoRA adapter of weight version {version} is no longer on disk ({path})")
        await self._load(post, name, path, version)

    @staticmethod
    async def _load(post: Post, name: str, path: Path, version: int) -> None:
        try:
            await post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        except EngineError as e:
            raise EngineError(f"vLLM did not load the LoRA adapter of weight version {version} ({path}): {e} "
                              "(the server keeps serving the previous version)") from e

    def close(self) -> None:
        if self._owns_exporter:
            self.exporter.close()
