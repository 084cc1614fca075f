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


def is_moe(model_or_config) -> bool:
    """Whether a model (or its config) routes tokens to experts."""
    cfg = getattr(model_or_config, "config", model_or_config)
    return bool(getattr(cfg, "num_experts", 0) or getattr(cfg, "num_local_experts", 0))


def _renormalizes(router: nn.Module, model_config) -> bool:
    """How the family turns top-k probabilities into weights (Qwen3-MoE: config; Mixtral: always)."""
    name = type(router).__name__
    if name.startswith("Qwen3Moe") or name.startswith("Qwen2Moe"):
        return bool(getattr(router, "norm_topk_prob", getattr(model_config, "norm_topk_prob", False)))
    if name.startswith("Mixtral"):
        return True
    raise NotImplementedError(
        f"R3 routing replay does not know the router {name}: supported families are Qwen3-MoE and Mixtral"
    )


class RoutingReplayer:
    """R3: make every router use recorded expert ids instead of choosing its own.

    Set `routing` to an int tensor [N, num_moe_layers, k] in the routers' flattened token order
    (row b*T + t) before a forward; rows holding -1 route freely. The hook keeps the router's own
    logits and recomputes the top-k weights at the recorded ids (softmax in fp32, renormalized as
    the family does), so gradients still reach the router weights.
    """

    def __init__(self, model: nn.Module):
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError("R3 routing replay needs an MoE model; this model has no router modules")
        self._norm = [_renormalizes(r, model.config) for r in self.routers]
        self.routing: torch.Tensor | None = None
        self.replayed_rows = 0
        self.total_rows = 0
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in enumerate(self.routers)]

    def _hook(self, i: int):
        def hook(_module, _inputs, output):
            if self.routing is None:
                return output
            logits, weights, indices = output
            rec = self.routing[:, i, :].to(indices.device).long()
            if rec.shape[0] != indices.shape[0]:
                raise ValueError(f"R3: recorded routing has {rec.shape[0]} rows, the forward has {indices.shape[0]}")
            known = (rec >= 0).all(-1)
            if i == 0:
                self.replayed_rows += int(known.sum())
                self.total_rows += int(known.numel())
            new_idx = torch.where(known.unsqueeze(-1), rec, indices)
            probs = torch.softmax(logits.float(), dim=-1)
            w = probs.gather(1, new_idx)
            if self._norm[i]:
                w = w / w.sum(-1, keepdim=True)
            return logits, w.to(weights.dtype), new_idx

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def routing_tensor(rows: list, seq_len: int, num_layers: int, top_k: int) -> torch.Tensor:
    """Per-row recorded routing ([n_i - 1, L, k] arrays or None) as [B * seq_len, L, k], -1 padded."""
    out = torch.full((len(rows), seq_len, num_layers, top_k), -1, dtype=torch.long)
    for b, r in enumerate(rows):
        if r is None:
            continue
        t = torch.as_tensor(r[:seq_len], dtype=torch.long)
        out[b, : t.shape[0]] = t
    return out.reshape(-1, num_layers, top_k)
