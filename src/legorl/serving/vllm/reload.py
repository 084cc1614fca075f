"""How new weights reach one vLLM server, and what a restarted server gets back.

Three ways, one per run kind: safetensors files the server reloads in place (`/collective_rpc reload_weights`,
the default), the bytes over a process group into the server's worker extension (`weight_transport =
"collective"`, transfer.py), or, in a LoRA run, the adapter loaded under a new name (lora.py). `VLLMEngine`
brackets a sync with its pause and records the version; this object validates the update (before the pause) and
applies it (inside it). After a restart it puts back the version the server served: the adapter, the newest
exported files, or nothing for the checkpoint (version 0); a version that only went over the wire cannot come
back, and the replica then waits for a full sync.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from legorl.serving.types import EngineClosedError, InvalidRequestError
from legorl.serving.vllm.lora import VLLMLora, refuse_adapter_update
from legorl.serving.vllm.transfer import CollectiveTransport
from legorl.serving.vllm.weights import (
    SafetensorsExporter,
    check_state_dict,
    checkpoint_shapes,
    tied_embeddings,
)

Post = Callable[..., Awaitable[dict[str, Any]]]


class WeightLoader:
    """One server's weight path. `post(path, body, plain=False)` is the engine's HTTP call to the server; `engine`
    gives the collective transport its url and session."""

    def __init__(self, engine: Any, post: Post, model_dir: Path | None, exporter: SafetensorsExporter | None,
                 owns_exporter: bool, lora: VLLMLora | None, transport: Literal["files", "collective"],
                 timeout_s: float):
        self.post, self.model_dir, self.lora = post, model_dir, lora
        self.exporter = exporter
        self.owns_exporter = owns_exporter and exporter is not None  # close() releases it (shared: refcounted)
        self.transport = CollectiveTransport(engine, timeout_s) if transport == "collective" else None
        self._shapes: dict[str, tuple[int, ...]] | None = None
        self._tied = False

    def model(self, base: str) -> str:
        """The `model` a request names: the served base, or in a LoRA run the adapter the server last accepted."""
        return self.lora.model(base) if self.lora is not None else base

    @property
    def waits_for_full_sync(self) -> bool:
        """The last collective sync failed: the server may hold a mix of versions and must serve nothing."""
        return self.transport is not None and self.transport.fallback

    async def prepare(self, state_dict: Mapping[str, object], version: int) -> Path | None:
        """Check the update against the served checkpoint before anything is paused; a LoRA run's adapter is
        written here (its directory returned)."""
        if self.model_dir is None:
            raise InvalidRequestError("weight sync to an attached vLLM server needs its model_dir")
        if self._shapes is None:  # the served checkpoint, read once
            self._shapes, self._tied = checkpoint_shapes(self.model_dir), tied_embeddings(self.model_dir)
        if self.lora is not None:
            return await self.lora.export(state_dict, version, self._shapes)
        refuse_adapter_update(state_dict)
        check_state_dict(state_dict, self._shapes, self._tied)
        if self.transport is not None:
            self.transport.check_restorable(state_dict, self._shapes, self._tied)
        if self.exporter is None:
            self.exporter, self.owns_exporter = SafetensorsExporter(), True
        return None

    async def apply(self, state_dict: Mapping[str, object], version: int, prepared: Path | None) -> None:
        """Put `state_dict` (as `prepare` saw it) into the paused server and label it `version`."""
        if self.lora is not None:
            assert prepared is not None
            await self.lora.load(self._post_plain, prepared, version)
        elif self.transport is not None and not self.transport.fallback:
            await self.transport.push(state_dict, self._tied)  # type: ignore[arg-type]
            await self.post("/update_weight_version", {"new_version": str(version)})
        else:
            assert self.exporter is not None
            await self._load(await self.exporter.export(state_dict, version, self._tied), version)
            if self.transport is not None:
                self.transport.fallback = False  # whole again: the next sync forms a new pair

    async def restore(self, version: int, name: str) -> None:
        """A restarted server: give it back `version`, the one it served."""
        if self.lora is not None:  # the base is the checkpoint; the adapter goes back before any request
            await self.lora.restore(self._post_plain)
            return
        latest = self.exporter.latest if self.exporter else None
        if self.transport is not None and self.transport.restarted(latest, version):
            return
        if version == 0 and latest is None:
            return
        if latest is None or latest[0] != version:
            raise EngineClosedError(f"vLLM server of {name} restarted but the weights of version "
                                    f"{version} are no longer on disk")
        await self._load(latest[1], version)

    def close(self) -> None:
        if self.owns_exporter and self.exporter is not None:
            self.exporter.close()
        if self.lora is not None:
            self.lora.close()

    async def _load(self, path: Path, version: int) -> None:
        """Reload the server's weights in place from `path` and label them `version`."""
        await self.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})
        await self.post("/update_weight_version", {"new_version": str(version)})

    async def _post_plain(self, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        return await self.post(path, body, plain=True)
