"""A replica actor's receive of one collective bucket (`cluster.weight_transport = "collective"`): the bytes come
over its pair group in a thread (the actor's loop keeps serving), a delta is rebuilt onto the weights its
engine serves, and any failure is a `ReplicaDiedError`: the gateway marks the replica dead and the driver revives
it with a full sync."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import torch

from legorl.cluster.collective import CollectiveBucket, Receiver
from legorl.serving.replica_proc import ReplicaDiedError


async def receive_bucket(receiver: Receiver, meta: CollectiveBucket, engine: Any, name: str) -> dict[str, torch.Tensor]:
    try:
        return await asyncio.to_thread(receiver.receive, meta, engine_device(engine), held_weights(engine))
    except Exception as exc:  # out of sync now: the gateway marks it dead and revives it with a full sync
        raise ReplicaDiedError(f"{name}: weight transfer failed: {exc}") from exc


def engine_device(e: Any) -> Any:
    model = getattr(e, "model", None)
    return next(model.parameters()).device if model is not None else "cpu"


def held_weights(e: Any) -> Callable[[tuple[str, ...]], Mapping[str, torch.Tensor]] | None:
    """The engine's current tensors by name (a delta's base), or None for an engine without an in-process
    model. Read while the engine is paused for the sync, so nothing writes them meanwhile."""
    model = getattr(e, "model", None)
    if model is None:
        return None

    def held(names: tuple[str, ...]) -> Mapping[str, torch.Tensor]:
        state = model.state_dict()
        return {n: state[n] for n in names}

    return held
