"""A value model for PPO with GAE: the policy's decoder with a scalar head (separate weights).

values[b, t] estimates the return before token t is generated, read from the hidden state at t-1.
"""

from __future__ import annotations

import torch
from torch import nn

from legorl.train.batch import TrainBatch
from legorl.train.losses import value_loss
from legorl.train.optim import adamw


class Critic(nn.Module):
    def __init__(self, model_dir: str, lr: float, max_grad_norm: float = 1.0, micro_batch_size: int = 2):
        super().__init__()
        from transformers import AutoModel

        self.decoder = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
        self.head = nn.Linear(self.decoder.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.optimizer = adamw(self.parameters(), lr=lr, weight_decay=0.01)  # torch's AdamW default decay, as before
        self.max_grad_norm = max_grad_norm
        self.micro_batch_size = micro_batch_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0).expand_as(input_ids)
        h = self.decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos).last_hidden_state
        v = self.head(h).squeeze(-1)  # value of the state after reading token t
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)  # shift: before token t

    @torch.no_grad()
    def values(self, batch: TrainBatch) -> torch.Tensor:
        out = torch.zeros_like(batch.mask)
        for i in range(0, batch.size, self.micro_batch_size):
            idx = list(range(i, min(i + self.micro_batch_size, batch.size)))
            mb = batch.select(idx)
            out[idx, : mb.input_ids.shape[1]] = self(mb.input_ids, mb.attention_mask) * mb.mask
        return out

    def update(self, batch: TrainBatch, old_values: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        total = float(batch.mask.sum().clamp(min=1))
        loss_sum = 0.0
        for i in range(0, batch.size, self.micro_batch_size):
            idx = list(range(i, min(i + self.micro_batch_size, batch.size)))
            mb = batch.select(idx)
            t = mb.input_ids.shape[1]
            v = self(mb.input_ids, mb.attention_mask)
            loss = value_loss(v, old_values[idx, :t], returns[idx, :t], mb.mask)
            frac = float(mb.mask.sum()) / total
            (loss * frac).backward()
            loss_sum += float(loss.detach()) * frac
        norm = float(torch.nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"critic/vf_loss": loss_sum, "critic/grad_norm": norm}
