"""LoRA on the trainer: adapter parameters on the targeted Linear layers, the base frozen.

Each targeted `nn.Linear` gets two parameters of its own, `lora_A` (r x in) and `lora_B` (out x r), a
`lora_scaling` buffer (alpha / r) and a forward hook adding `scaling * B(A(x))`. Parameter names and module
paths stay those of the base model (`model.layers.0.self_attn.q_proj.weight` is still there), so FSDP2's
per-layer sharding, R3's router hooks, activation checkpointing and the shared-prefix forward work
unchanged; PEFT's wrapper would rename every parameter (`base_model.model....`) and swap the modules
(docs/lora.md). `legorl export` still writes the PEFT adapter format.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from legorl.config.trials import LoraSection
from legorl.models.moe import find_routers
from legorl.serving.adapter import is_adapter_key
from legorl.train.memory import decoder_layers

ADAPTER_FILE = "adapter.safetensors"  # a LoRA checkpoint's weights: the adapter alone


def _targets(model: torch.nn.Module, cfg: LoraSection) -> list[tuple[str, torch.nn.Linear]]:
    routers = {id(r) for r in find_routers(model)}
    layer_ids = {id(m) for layer in decoder_layers(model) for m in layer.modules()}
    out = []
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear) or id(m) in routers or id(m) not in layer_ids:
            continue
        if cfg.target_modules == "all-linear" or name.rsplit(".", 1)[-1] in cfg.target_modules:
            out.append((name, m))
    return out


def _hook(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
    x = inputs[0]
    a, b = module.lora_A, module.lora_B
    return output + F.linear(F.linear(x.to(a.dtype), a), b).to(output.dtype) * module.lora_scaling


def attach_lora(model: torch.nn.Module, cfg: LoraSection, seed: int = 0) -> list[str]:
    """Freeze the base and give every targeted Linear an adapter; returns the targeted module paths."""
    targets = _targets(model, cfg)
    if not targets:
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(f"model.lora.target_modules={cfg.target_modules!r} matches no Linear layer of this "
                         f"model (it has {names})")
    model.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    for _, m in targets:
        w = m.weight
        a = torch.empty(cfg.rank, m.in_features, dtype=torch.float32)
        bound = 1.0 / math.sqrt(m.in_features)  # kaiming_uniform(a=sqrt(5)), as nn.Linear and PEFT init A
        a.uniform_(-bound, bound, generator=gen)
        b = torch.zeros(m.out_features, cfg.rank, dtype=torch.float32)
        if cfg.init == "gaussian":
            b.normal_(0.0, 0.02, generator=gen)
        m.lora_A = torch.nn.Parameter(a.to(w.device))
        m.lora_B = torch.nn.Parameter(b.to(w.device))
        m.register_buffer("lora_scaling", torch.tensor(cfg.alpha / cfg.rank, dtype=torch.float32, device=w.device))
        m.register_forward_hook(_hook)
    return [n for n, _ in targets]


def is_lora(model: torch.nn.Module) -> bool:
    return any(n.endswith(".lora_A") for n, _ in model.named_parameters())


def adapter_names(model: torch.nn.Module) -> list[str]:
    """State-dict names of the adapter (A, B, scaling per module), in module order."""
    return [k for k in model.state_dict() if is_adapter_key(k)]


def adapter_state(model: torch.nn.Module, gather: bool = True) -> dict[str, torch.Tensor]:
    """The adapter tensors on CPU (under FSDP2 each is gathered: every rank must call this)."""
    sd = model.state_dict()
    out = {}
    for k in adapter_names(model):
        v = sd[k]
        if gather and hasattr(v, "full_tensor"):
            v = v.full_tensor()
        out[k] = v.detach().to("cpu", copy=True)
    return out


@torch.no_grad()
def load_adapter(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy adapter tensors into the model (one process); names and shapes must match exactly."""
    params = dict(model.state_dict())
    mine = set(adapter_names(model))
    if set(state) != mine:
        raise ValueError(f"adapter mismatch: missing {sorted(mine - set(state))[:3]}, "
                         f"unexpected {sorted(set(state) - mine)[:3]} (was the checkpoint written with the same "
                         "model.lora settings?)")
    for k, v in state.items():
        if tuple(v.shape) != tuple(params[k].shape):
            raise ValueError(f"adapter {k} has shape {tuple(v.shape)}, expected {tuple(params[k].shape)} "
                             "(model.lora.rank changed?)")
        params[k].copy_(v)
