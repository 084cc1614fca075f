"""What accelerators this host has, read from the OS without importing torch.

Its own module so both preflight modules can ask without importing each other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def count_gpus() -> int:
    """NVIDIA GPUs visible to this process, without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        return len(list(proc.iterdir()))
    return len([p for p in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)])
