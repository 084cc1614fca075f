"""One engine step's packed inputs: decode rows and prefill chunks of several requests in one forward.

The scheduler (engine.py) picks `Work` items: a request and the positions it computes this step. This module
turns them into the model's inputs (one packed row of tokens, their positions, which hidden states
need logits) and the `StepBatch` every attention layer reads (paged.py). Block tables are read from the
requests as they are; nothing about the previous step is kept, so batch membership may change freely.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from legorl.serving.embedded.blocks import BlockPool
from legorl.serving.embedded.paged import PrefillPart, StepBatch
from legorl.serving.embedded.sequence import Sequence


@dataclass
class Work:
    """Positions [start, start + n) of `seq` are computed this step."""

    seq: Sequence
    start: int
    n: int

    @property
    def samples(self) -> bool:
        """The step reaches the last token, so its logits give the next one."""
        return self.start + self.n == len(self.seq.tokens)


@dataclass
class StepInputs:
    work: list[Work]  # in packed order: one-token rows first
    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    keep: torch.Tensor  # packed index of each sampling item's last token, in `work` order
    batch: StepBatch


def build(pool: BlockPool, work: list[Work], device: torch.device, decode_kernel: bool = False,
          threads: int = 1) -> StepInputs:
    """`decode_kernel`: the decode rows' block tables and lengths for the C kernel (decode_kernel.py, its rows
    split over `threads`) instead of the torch path's flat block list and additive mask."""
    bs = pool.block_size
    work = [w for w in work if w.n == 1] + [w for w in work if w.n > 1]
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    keep: list[int] = []
    dec_tables: list[list[int]] = []
    dec_lens: list[int] = []
    prefills: list[PrefillPart] = []
    for w in work:
        s, t0, end = w.seq, len(ids), w.start + w.n
        ids.extend(s.tokens[w.start : end])
        pos.extend(range(w.start, end))
        blocks = s.blocks
        slots.extend(blocks[p // bs] * bs + p % bs for p in range(w.start, end))
        nb = -(-end // bs)
        if w.n == 1:
            dec_tables.append(blocks[:nb])
            dec_lens.append(end)
        else:
            prefills.append(PrefillPart(t0, w.n, w.start, torch.tensor(blocks[:nb], dtype=torch.long, device=device)))
        if w.samples:
            keep.append(len(ids) - 1)
    batch = StepBatch(pool.k, pool.v, bs, torch.tensor(slots, dtype=torch.long, device=device),
                      n_dec=len(dec_tables), prefills=prefills)
    if dec_tables:
        width = max(len(t) for t in dec_tables)
        table = torch.full((len(dec_tables), width), pool.pad_block, dtype=torch.long)
        for i, t in enumerate(dec_tables):
            table[i, : len(t)] = torch.tensor(t, dtype=torch.long)
        lens = torch.tensor(dec_lens, dtype=torch.long)
        if decode_kernel:
            batch.dec_tables, batch.dec_lens, batch.dec_threads = table, lens, threads
        else:
            visible = torch.arange(width * bs)[None, :] < lens[:, None]
            mask = torch.zeros(visible.shape, dtype=pool.k.dtype).masked_fill_(~visible, float("-inf"))
            batch.dec_blocks = table.reshape(-1).to(device)
            batch.dec_mask = mask[None, :, None, :].to(device)
    return StepInputs(
        work=work,
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([pos], dtype=torch.long, device=device),
        keep=torch.tensor(keep, dtype=torch.long, device=device),
        batch=batch,
    )
