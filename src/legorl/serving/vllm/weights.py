"""Weight sync to a vLLM server through its reload path: write safetensors, the server reloads them.

On one node (and on CPU) this is the path that works everywhere: the actor's full state dict is
written once per version to a directory the servers can read (shared memory when there is room),
then each server is told `collective_rpc("reload_weights", weights_path=DIR)`. Every replica of a
pool reads the same files, so a version is written once however many replicas there are.
Names and shapes are checked against the served checkpoint first, so a bad state dict fails before
any server is touched.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from legorl.serving.types import InvalidRequestError


def checkpoint_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of a HF safetensors checkpoint directory (headers only, no tensors)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():  # noqa: SIM118 (safe_open is not iterable)
                shapes[name] = tuple(st.get_slice(name).get_shape())
    return shapes


def tied_embeddings(model_dir: Path) -> bool:
    try:
        return bool(json.loads((Path(model_dir) / "config.json").read_text()).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return False


def check_state_dict(state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], tied: bool) -> None:
    """Refuse names the served model does not have and wrong shapes (a subset of parameters is fine)."""
    problems = []
    for name, t in state_dict.items():
        if tied and name == "lm_head.weight":
            continue
        if name not in expected:
            problems.append(f"unknown parameter {name!r}")
        elif tuple(t.shape) != expected[name]:
            problems.append(f"{name}: shape {tuple(t.shape)} != served {expected[name]}")
    problems += _split_fused_modules(state_dict, expected)
    if problems:
        raise InvalidRequestError("weight update refused: " + "; ".join(problems[:5]))


# checkpoint tensors vLLM loads into one fused module: its in-place reload rebuilds the module from
# what it is given, so a partial update must carry every shard (measured: q_proj alone -> garbage)
FUSED_SHARDS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _split_fused_modules(state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]]) -> list[str]:
    problems = []
    for name in state_dict:
        parts = name.split(".")
        for group in FUSED_SHARDS:
            hits = [i for i, p in enumerate(parts) if p in group]
            if not hits:
                continue
            i = hits[-1]
            siblings = [".".join([*parts[:i], g, *parts[i + 1 :]]) for g in group if g != parts[i]]
            missing = [sib for sib in siblings if sib in expected and sib not in state_dict]
            if missing:
                problems.append(f"{name} without {', '.join(m.split('.')[i] for m in missing)}: vLLM fuses them "
                                "into one module and reloads it whole (send all its shards, or the full state dict)")
    return problems


def default_export_root() -> Path:
    """Shared memory when it exists (no disk I/O on the sync path), else the temp dir."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


class SafetensorsExporter:
    """Writes each weight version once under `root` and keeps only the newest on disk.

    Shared by the replicas of one run: concurrent `export` calls for the same version wait for a
    single write.
    """

    def __init__(self, root: Path | None = None, dtype: torch.dtype | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="legorl-weights-", dir=root or default_export_root()))
        self.dtype = dtype
        self._lock = asyncio.Lock()
        self._written: tuple[int, Path] | None = None
        self._users = 1

    def share(self, users: int) -> SafetensorsExporter:
        """`users` replicas hold this exporter; the files go when the last one closes it."""
        self._users = users
        return self

    @property
    def latest(self) -> tuple[int, Path] | None:
        """(version, directory) of the newest version written, if any."""
        return self._written

    async def export(self, state_dict: Mapping[str, Any], version: int, tied: bool = False) -> Path:
        async with self._lock:
            if self._written and self._written[0] == version:
                return self._written[1]
            path = self.root / f"v{version}"
            await asyncio.to_thread(self._write, state_dict, path, tied)
            if self._written:
                shutil.rmtree(self._written[1], ignore_errors=True)
            self._written = (version, path)
            return path

    def _write(self, state_dict: Mapping[str, Any], path: Path, tied: bool) -> None:
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tensors = {}
        for name, t in state_dict.items():
            t = t.detach()
            if self.dtype is not None and t.is_floating_point():
                t = t.to(self.dtype)
            tensors[name] = t.to("cpu").contiguous()
        if tied and "model.embed_tokens.weight" in tensors:
            # vLLM's in-place reload rebuilds each module on its own: a tied lm_head that gets no
            # tensor keeps its old values, so it is written too (a copy: safetensors refuses aliases)
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        save_file(tensors, str(tmp / "model.safetensors"))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)

    def close(self, force: bool = False) -> None:
        """One user is done; the last one (or `force`) removes the files (RAM, when the root is /dev/shm)."""
        self._users -= 1
        if self._users <= 0 or force:
            shutil.rmtree(self.root, ignore_errors=True)

