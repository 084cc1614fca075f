"""Model forward passes over the paged KV pool: chunked prefill and batched decode.

The model is a plain HF causal LM. Past KV is gathered from the pool into a `DynamicCache`
(left-padded for a batch), the model runs, and the new positions' K/V are scattered back into the
pool. While the decode batch keeps the same members, the cache is reused between steps, so the
steady-state cost per step matches HF's own `generate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from legorl.models.moe import RoutingRecorder
from legorl.serving.embedded.blocks import BlockPool


@dataclass
class KVDims:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def probe_kv_dims(model) -> KVDims:
    """Read the KV layout from one tiny forward (robust to GQA, head_dim overrides, etc.)."""
    cache = DynamicCache()
    model(input_ids=torch.tensor([[0]], device=model_device(model)), cache=cache, use_cache=True)
    k = cache.layers[0].keys
    return KVDims(len(cache.layers), k.shape[1], k.shape[3], k.dtype)


class ModelRunner:
    def __init__(self, model, pool: BlockPool, recorder: RoutingRecorder, prefill_chunk: int = 512):
        self.model = model
        self.device = model_device(model)  # inputs go here; block tables and sampling stay on the CPU
        self.pool = pool
        self.recorder = recorder
        self.prefill_chunk = prefill_chunk
        self._batch: list[tuple[int, int]] | None = None  # (seq key, num_computed) of the cached batch
        self._cache: DynamicCache | None = None
        self._mask: torch.Tensor | None = None

    def invalidate(self) -> None:
        self._batch, self._cache, self._mask = None, None, None

    def _gather(self, rows: list[tuple[list[int], int]]) -> tuple[DynamicCache, torch.Tensor]:
        """Left-padded cache + mask for rows of (block table, length)."""
        pool = self.pool
        t_max = max(n for _, n in rows)
        idx = torch.full((len(rows), t_max), pool.pad_slot, dtype=torch.long)
        mask = torch.zeros((len(rows), t_max), dtype=torch.long)
        for i, (blocks, n) in enumerate(rows):
            if n:
                idx[i, t_max - n :] = pool.slots(blocks, 0, n)
                mask[i, t_max - n :] = 1
        flat = idx.reshape(-1).to(pool.k.device)
        k = pool.k[:, flat].view(pool.k.shape[0], len(rows), t_max, *pool.k.shape[2:]).transpose(2, 3)
        v = pool.v[:, flat].view(pool.v.shape[0], len(rows), t_max, *pool.v.shape[2:]).transpose(2, 3)
        cache = DynamicCache(ddp_cache_data=[(k[i].contiguous(), v[i].contiguous()) for i in range(k.shape[0])])
        return cache, mask.to(self.device)

    def _scatter_last(self, cache: DynamicCache, n_new: int, slots: torch.Tensor, row: int | None = None) -> None:
        """Write the last `n_new` positions of the cache (all rows, or one row) into `slots`."""
        sel = slice(None) if row is None else slice(row, row + 1)
        k = torch.stack([layer.keys[sel, :, -n_new:] for layer in cache.layers])  # [L, B, H, n, D]
        v = torch.stack([layer.values[sel, :, -n_new:] for layer in cache.layers])
        # -> [L, B*n, H, D] in (row, position) order
        k = k.permute(0, 1, 3, 2, 4).reshape(k.shape[0], -1, k.shape[2], k.shape[4])
        v = v.permute(0, 1, 3, 2, 4).reshape(v.shape[0], -1, v.shape[2], v.shape[4])
        self.pool.write(slots, k, v)

    @torch.no_grad()
    def prefill(self, tokens: list[int], blocks: list[int], start: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Compute KV for tokens[start:] (positions before `start` are resident in `blocks`).

        Returns the last position's logits [V] and the routing of positions start.. ([n, L, k]).
        """
        self.invalidate()
        if start:
            cache, _ = self._gather([(blocks, start)])
        else:
            cache = DynamicCache()
        routing = []
        logits = None
        for c0 in range(start, len(tokens), self.prefill_chunk):
            c1 = min(c0 + self.prefill_chunk, len(tokens))
            out = self.model(
                input_ids=torch.tensor([tokens[c0:c1]], device=self.device),
                position_ids=torch.arange(c0, c1, device=self.device).unsqueeze(0),
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self._scatter_last(cache, c1 - c0, self.pool.slots(blocks, c0, c1))
            r = self.recorder.take()
            if r is not None:
                routing.append(r)
            logits = out.logits[0, -1]
        assert logits is not None
        return _host(logits), (_host(torch.cat(routing)) if routing else None)

    @torch.no_grad()
    def decode(
        self, rows: list[tuple[int, list[int], int, int]]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One decode step. rows: (seq key, block table, num_computed, next input token).

        Feeds each row's next token at position num_computed and returns logits [B, V] and
        routing [B, L, k]. The new K/V go to each row's slot for that position.
        """
        key = [(s, n) for s, _, n, _ in rows]
        if self._batch is not None and self._cache is not None and key == [(s, n + 1) for s, n in self._batch]:
            cache, mask = self._cache, self._mask
        else:
            cache, mask = self._gather([(b, n) for _, b, n, _ in rows])
        assert mask is not None
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=mask.device)], dim=1)
        out = self.model(
            input_ids=torch.tensor([[t] for *_, t in rows], device=self.device),
            position_ids=torch.tensor([[n] for _, _, n, _ in rows], device=self.device),
            attention_mask=mask,
            cache=cache,
            use_cache=True,
        )
        slots = torch.cat([self.pool.slots(b, n, n + 1) for _, b, n, _ in rows])
        self._scatter_last(cache, 1, slots)
        self._batch, self._cache, self._mask = key, cache, mask
        routing = self.recorder.take()
        return _host(out.logits[:, -1]), (_host(routing) if routing is not None else None)

    @torch.no_grad()
    def full_logprobs(self, tokens: list[int], temperature: float) -> list[float | None]:
        """Teacher-forced log p(tokens[i] | tokens[:i]) without touching the pool."""
        ids = torch.tensor([tokens], device=self.device)
        logits = self.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        self.recorder.take()
        if temperature > 0:
            logits = logits / temperature
        lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        return [None, *lp.cpu().tolist()]


def _host(t: torch.Tensor) -> torch.Tensor:
    """Logits and routing to the CPU, where the per-row seeded samplers run (a no-op on CPU)."""
    return t if t.device.type == "cpu" else t.float().cpu() if t.is_floating_point() else t.cpu()
