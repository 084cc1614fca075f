"""Paged KV storage with a hash-chained prefix cache under a fixed token budget.

The pool owns `num_blocks` blocks of `block_size` token slots. K/V live head-major per layer,
`[layers, kv_heads, (num_blocks + 1) * block_size, head_dim]`: a block of one head is one contiguous run,
so attention gathers a layer's blocks with one block-granular index op (paged.py), and the extra
all-zero block (`pad_block`) pads rows of a batch to the same length.

A full block is registered under the hash of (parent block hash, its tokens): two sequences that
share a prefix share those blocks. Blocks nobody references stay cached (LRU) until space is needed.
`usage()` counts only referenced blocks, as vLLM's `kv_cache_usage_perc` does.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque

import numpy as np
import torch


def chain_hashes(token_ids: list[int], block_size: int, root: bytes, num_blocks: int | None = None) -> list[bytes]:
    """Hash of each full block of `token_ids`, each chained on the previous block's hash."""
    n = len(token_ids) // block_size if num_blocks is None else num_blocks
    arr = np.asarray(token_ids[: n * block_size], dtype=np.int64)
    out, parent = [], root
    for i in range(n):
        h = hashlib.blake2b(parent + arr[i * block_size : (i + 1) * block_size].tobytes(), digest_size=16)
        parent = h.digest()
        out.append(parent)
    return out


class BlockPool:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        routing_shape: tuple[int, int] | None = None,
        device: torch.device | str = "cpu",
    ):
        if num_blocks < 2:
            raise ValueError(f"KV budget too small: {num_blocks} blocks of {block_size} tokens")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pad_block = num_blocks
        self._shape = (num_layers, kv_heads, (num_blocks + 1) * block_size, head_dim)
        self.k = self.v = torch.empty(0, dtype=dtype, device=device)  # KV lives with the model
        self.freed = True
        self.restore_storage()  # allocated whole, zeroed
        # routed experts per slot [slots, moe_layers, top_k] (MoE only), so cached prefixes keep theirs
        self.routing = (
            torch.full((num_blocks * block_size, *routing_shape), -1, dtype=torch.int16) if routing_shape else None
        )
        self.ref = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.by_hash: dict[bytes, int] = {}
        self.free: deque[int] = deque(range(num_blocks))
        self.cached: OrderedDict[int, None] = OrderedDict()  # ref == 0 but hashed: LRU order
        self.lock = threading.Lock()
        self.evictions = 0

    # -- accounting -------------------------------------------------------------------------------
    def available(self) -> int:
        return len(self.free) + len(self.cached)

    def usage(self) -> float:
        return 1.0 - self.available() / self.num_blocks

    # -- allocation -------------------------------------------------------------------------------
    def allocate(self) -> int | None:
        """A fresh private block (evicting the least recently used cached block if needed)."""
        with self.lock:
            if self.free:
                b = self.free.popleft()
            elif self.cached:
                b, _ = self.cached.popitem(last=False)
                h = self.block_hash[b]
                if h is not None and self.by_hash.get(h) == b:
                    del self.by_hash[h]
                self.block_hash[b] = None
                self.evictions += 1
            else:
                return None
            self.ref[b] = 1
            return b

    def acquire(self, b: int) -> None:
        with self.lock:
            if self.ref[b] == 0:
                self.cached.pop(b, None)
            self.ref[b] += 1

    def release(self, blocks: list[int]) -> None:
        with self.lock:
            for b in blocks:
                self.ref[b] -= 1
                assert self.ref[b] >= 0, f"block {b} released twice"
                if self.ref[b] == 0:
                    if self.block_hash[b] is not None:
                        self.cached[b] = None
                        self.cached.move_to_end(b)
                    else:
                        self.free.append(b)

    def register(self, b: int, h: bytes) -> None:
        """Mark a full block as holding the content hashed `h` (first writer wins the lookup)."""
        with self.lock:
            self.block_hash[b] = h
            self.by_hash.setdefault(h, b)

    def match(self, hashes: list[bytes]) -> list[int]:
        """Leading blocks whose content is resident (does not take references)."""
        out = []
        with self.lock:
            for h in hashes:
                b = self.by_hash.get(h)
                if b is None:
                    break
                out.append(b)
        return out

    def clear_cache(self) -> None:
        """Forget every cached prefix (after a weight update). Referenced blocks stay allocated."""
        with self.lock:
            for b in list(self.cached):
                self.block_hash[b] = None
                self.free.append(b)
            self.cached.clear()
            self.by_hash.clear()
            for b in range(self.num_blocks):
                self.block_hash[b] = None

    def free_storage(self) -> None:
        """Give the K/V tensors' memory back (a synchronous run's update: `serving.free_kv_during_update`).
        Every cached prefix is forgotten; no block may be referenced. `restore_storage` makes them anew."""
        with self.lock:
            held = sum(1 for r in self.ref if r)
            if held:
                raise RuntimeError(f"cannot free the KV pool: {held} block(s) are still referenced")
        self.clear_cache()
        self.k = self.v = self.k.new_empty(0)
        self.freed = True

    def restore_storage(self) -> None:
        """Allocate the K/V tensors (zeroed) at start and after `free_storage`; a no-op otherwise."""
        if self.freed:
            self.k = self.k.new_zeros(self._shape)
            self.v = self.v.new_zeros(self._shape)
            self.freed = False

    # -- data -------------------------------------------------------------------------------------
    def slots(self, blocks: list[int], start: int, end: int) -> torch.Tensor:
        """Slot indices of token positions [start, end) of a sequence with block table `blocks`."""
        pos = torch.arange(start, end)
        table = torch.tensor(blocks, dtype=torch.long)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size
