"""Where and in what precision the trainer computes: `trainer.device` and `trainer.dtype`.

bf16 is compute precision only: master weights and optimizer state stay fp32 (autocast in one process,
FSDP2's MixedPrecisionPolicy under FSDP), and logprobs and losses are computed in fp32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class DeviceUnavailableError(RuntimeError):
    """The config names a device this machine does not have."""


def resolve_device(name: str) -> torch.device:
    """`auto`: CUDA when present, else CPU; `cuda` / `cuda:N` refused with a reason when absent."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"trainer.device={name!r} but this machine has no CUDA device torch can use "
            f"(torch {torch.__version__}); set trainer.device = \"auto\" or \"cpu\""
        )
    return dev


def compute_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def autocast(device: torch.device, dtype: torch.dtype, enabled: bool = True):
    """bf16 autocast around a forward (a no-op for fp32 or when FSDP2 already casts the params)."""
    if not enabled or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@dataclass(frozen=True)
class LogprobGap:
    """The mean |rollout - trainer| logprob gap to expect from a precision pair, and a gate
    (`trainer.max_logprob_abs_diff`) that passes it while still catching real token/weight mismatches."""

    expected: float
    gate: float


def expected_logprob_gap(engine_dtype: str, trainer_dtype: str) -> LogprobGap:
    """Measured on this repo's models (docs/trainer.md): fp32 vs fp32 agree to ~1e-6; bf16 on either
    side rounds every matmul and leaves 1e-2 to 4e-2 per token."""
    low = {"bfloat16", "float16"}
    if engine_dtype in low or trainer_dtype in low:
        return LogprobGap(expected=3e-2, gate=0.1)
    return LogprobGap(expected=1e-5, gate=1e-3)
