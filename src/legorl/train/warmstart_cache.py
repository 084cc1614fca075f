"""Warm-started models kept per machine (`$LEGORL_HOME/warm_starts/<key>`, `warm_start.cache`): runs that differ
only after the warm start (the RL settings, a resumed sweep) share one fine-tune instead of each paying for it
(7-10 minutes of the look-act demo's 15-25 on 2 cores).

The key hashes everything the fine-tune reads: the base model's files, the encoded demonstrations (token ids
and loss masks, so the tasks, the scaffold's prompts and the replayed outputs are all in it), the settings
that shape the optimisation, the seed, and the torch / transformers versions. A hit is the same computation
run before on this machine; its files are linked (or copied) into the run's own `warm_start/model`. The
newest `CACHE_ENTRIES` entries are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from legorl.config.training import WarmStartSection
from legorl.models.home import legorl_home

CACHE_ENTRIES = 4  # ~0.55 GB each at 135M in fp32
DONE = "done.json"
_KEY_VERSION = 3  # 3: fused AdamW (train/optim.py). Bump when the fine-tune's computation changes for the same inputs


def cache_root() -> Path:
    """`$LEGORL_WARM_STARTS`, else `$LEGORL_HOME/warm_starts` (the test suite points the variable at a temporary
    directory, so its tiny models' entries never evict a user's)."""
    override = os.environ.get("LEGORL_WARM_STARTS")
    return Path(override).expanduser() if override else legorl_home() / "warm_starts"


def cache_key(model_dir: Path, examples: list, section: WarmStartSection, seed: int, checkpointing: bool) -> str:
    """A digest of the fine-tune's inputs (`examples`: warmstart.Example, token ids and masks)."""
    import torch
    import transformers

    h = hashlib.sha256()
    settings = {"v": _KEY_VERSION, "epochs": section.epochs, "lr": section.lr, "lr_scheduler": section.lr_scheduler,
                "warmup_steps": section.warmup_steps, "batch_size": section.batch_size, "seed": seed,
                "checkpointing": checkpointing, "torch": torch.__version__, "transformers": transformers.__version__}
    h.update(json.dumps(settings, sort_keys=True).encode())
    for f in sorted(p for p in Path(model_dir).iterdir() if p.is_file()):
        h.update(f.name.encode())
        with f.open("rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    for e in examples:
        h.update(json.dumps([e.input_ids, e.mask]).encode())
    return h.hexdigest()[:32]


def lookup(key: str) -> tuple[Path, dict[str, float]] | None:
    """The cached entry for `key` and its record (the fine-tune's NLL), marked as just used; None when there is none
    or it cannot be read."""
    entry = cache_root() / key
    try:
        stats = json.loads((entry / DONE).read_text())
        os.utime(entry)
    except (OSError, ValueError):  # none, or evicted by another run meanwhile
        return None
    return entry, stats


def restore(entry: Path, out_dir: Path) -> None:
    """The entry's model files into `out_dir` (hard links where the filesystem allows, else copies)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    try:
        shutil.copytree(entry / "model", out_dir, copy_function=os.link)
    except OSError:  # another filesystem, or links not allowed
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.copytree(entry / "model", out_dir)


def store(key: str, model_dir: Path, stats: dict[str, float], on_line: Callable[[str], None] = print) -> None:
    """Keep a copy of a fresh warm start under `key`, then drop the least recently used beyond `CACHE_ENTRIES`.
    Never fails the run: a full disk or a read-only home only skips the cache, with one line saying so."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        shutil.copytree(model_dir, tmp / "model")
        (tmp / DONE).write_text(json.dumps(stats, indent=1) + "\n")
        target = root / key
        if target.exists() and not (target / "model" / "config.json").is_file():  # a damaged entry: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            tmp.rename(target)  # atomic: a reader sees the whole entry or none
        except OSError:  # another run stored the same key meanwhile: theirs is the same computation
            shutil.rmtree(tmp, ignore_errors=True)
        entries = sorted((p for p in root.iterdir() if not p.name.startswith(".") and (p / DONE).is_file()),
                         key=lambda p: p.stat().st_mtime)
        for old in entries[:-CACHE_ENTRIES]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in root.glob(".*-*"):  # a run that died while storing
            if stale.is_dir() and time.time() - stale.stat().st_mtime > 3600:
                shutil.rmtree(stale, ignore_errors=True)
    except OSError as exc:
        on_line(f"warm start: not cached ({exc}); set warm_start.cache = false to skip trying")
