"""What travels between a run's `RemoteEngine` and the server's engine API: JSON for requests and outputs,
safetensors bytes for an adapter (exact fp32 bits, no pickle)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from legorl.serving.types import GenerateRequest, SamplingParams, TokenOutput


def request_to_json(r: GenerateRequest) -> dict[str, Any]:
    return {"prompt_ids": list(r.prompt_ids), "sampling": dataclasses.asdict(r.sampling), "request_id": r.request_id,
            "session_id": r.session_id, "return_routed_experts": r.return_routed_experts, "adapter": r.adapter}


def request_from_json(d: Mapping[str, Any]) -> GenerateRequest:
    try:
        sp = SamplingParams(**d.get("sampling", {}))
        return GenerateRequest([int(t) for t in d["prompt_ids"]], sp, request_id=str(d["request_id"]),
                               session_id=d.get("session_id"), return_routed_experts=bool(d.get("return_routed_experts")),
                               adapter=d.get("adapter"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad generate request: {exc}") from exc


def _array(a: np.ndarray | None) -> dict[str, Any] | None:
    return None if a is None else {"shape": list(a.shape), "dtype": str(a.dtype), "data": a.reshape(-1).tolist()}


def _unarray(d: Mapping[str, Any] | None) -> np.ndarray | None:
    return None if d is None else np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"])


def output_to_json(o: TokenOutput) -> dict[str, Any]:
    d = {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    d["routed_experts"], d["prompt_routed_experts"] = _array(o.routed_experts), _array(o.prompt_routed_experts)
    return d


def output_from_json(d: Mapping[str, Any]) -> TokenOutput:
    d = dict(d)
    d["routed_experts"], d["prompt_routed_experts"] = _unarray(d["routed_experts"]), _unarray(d["prompt_routed_experts"])
    return TokenOutput(**d)


def pack_tensors(state: Mapping[str, Any]) -> bytes:
    from safetensors.torch import save

    return save({k: torch.as_tensor(v).detach().to("cpu").contiguous() for k, v in state.items()})


def unpack_tensors(data: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return load(data)
