"""What the embedded engine refuses before queueing a request, and how it copies new weights in: both
validate everything first, so a bad request or update changes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from legorl.serving.types import ContextLengthError, GenerateRequest, InvalidRequestError


def check_ids(ids: list[int], vocab_size: int) -> None:
    if any(not isinstance(t, int) or t < 0 or t >= vocab_size for t in ids):
        raise InvalidRequestError(f"token ids must be integers in [0, {vocab_size})")


def check_request(request: GenerateRequest, vocab_size: int, max_model_len: int, kv_budget: int) -> None:
    """Sampling values, prompt ids, the context window and the KV budget (the engine checks closed-ness)."""
    request.sampling.validate()
    ids = request.prompt_ids
    if not ids:
        raise InvalidRequestError("empty prompt: at least one token is required")
    check_ids(ids, vocab_size)
    if len(ids) >= max_model_len:
        raise ContextLengthError(
            f"prompt of {len(ids)} tokens leaves no room in the model's context of {max_model_len}",
            len(ids), max_model_len,
        )
    if len(ids) + 1 > kv_budget:
        raise ContextLengthError(
            f"prompt of {len(ids)} tokens exceeds the KV budget of {kv_budget} tokens (raise kv_budget_tokens)",
            len(ids), kv_budget,
        )


def copy_weights(model: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Check every name and shape, then copy in place (onto the model's device and dtype). A tensor that is
    already the parameter's storage (an engine serving the trainer's own model) is left as it is."""
    params = dict(model.state_dict())
    unknown = [k for k in state_dict if k not in params]
    if unknown:
        raise ValueError(f"update_weights: unknown parameter names {unknown[:5]}")
    for k, t in state_dict.items():
        if tuple(t.shape) != tuple(params[k].shape):
            raise ValueError(f"update_weights: {k} has shape {tuple(t.shape)}, expected {tuple(params[k].shape)}")
    with torch.no_grad():
        for k, t in state_dict.items():
            p = params[k]
            if not (t.data_ptr() == p.data_ptr() and t.dtype == p.dtype and t.stride() == p.stride()):
                p.copy_(t)
