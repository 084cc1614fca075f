"""MoE router discovery and routed-expert capture.

transformers' Qwen3-MoE / Mixtral routers (`layer.mlp.gate`) return
(router_logits [N, E], top-k weights [N, k], top-k indices [N, k]). Capture is a forward hook that
keeps the indices; the engine records them at generation and the trainer replays them (R3).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn


def find_routers(model: nn.Module) -> list[nn.Module]:
    """Router modules in layer order (empty for a dense model)."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    if layers is None:
        return []
    routers = []
    for layer in layers:
        mlp = getattr(layer, "mlp", None)
        gate = getattr(mlp, "gate", None)
        if gate is not None and hasattr(mlp, "experts"):
            routers.append(gate)
    return routers


def router_top_k(model: nn.Module) -> int:
    cfg = model.config
    return int(getattr(cfg, "num_experts_per_tok", 0) or getattr(cfg, "top_k", 0) or 0)


class RoutingRecorder:
    """Collects top-k expert indices from every router for the current forward pass.

    `take()` returns an int16 tensor [N, num_moe_layers, k] in the routers' flattened token order
    (batch-major: row b*T + t), then clears the buffer.
    """

    def __init__(self, model: nn.Module):
        self.routers = find_routers(model)
        self.top_k = router_top_k(model)
        self._buf: list[torch.Tensor | None] = [None] * len(self.routers)
        self._handles = []
        for i, router in enumerate(self.routers):
            self._handles.append(router.register_forward_hook(self._hook(i)))

    @property
    def enabled(self) -> bool:
        return bool(self.routers)

    def _hook(self, i: int):
        def hook(_module, _inputs, output):
            self._buf[i] = output[2].detach().to(torch.int16)

        return hook

    def take(self) -> torch.Tensor | None:
        if not self.routers or any(b is None for b in self._buf):
            self._buf = [None] * len(self.routers)
            return None
        out = torch.stack(self._buf, dim=1)  # type: ignore[arg-type]
        self._buf = [None] * len(self.routers)
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


@contextmanager
def recording(model: nn.Module):
    rec = RoutingRecorder(model)
    try:
        yield rec
    finally:
        rec.remove()
