"""The actor: recompute logprobs, take policy-gradient steps over micro-batches, hand out weights.

Works unchanged on one process and under torch.distributed (FSDP2 shards the model; each rank
holds a slice of the batch; loss weights use global token / sequence counts so the sharded step
equals the single-process one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from legorl.config import AlgorithmSection, TrainerSection
from legorl.models.moe import RoutingReplayer, routing_tensor
from legorl.train.batch import TrainBatch
from legorl.train.logprobs import token_logprobs
from legorl.train.losses import aggregate, kl_penalty
from legorl.train.registry import policy_loss


def lr_lambda(kind: str, warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_sum(x: float) -> float:
    _, world = _world()
    if world == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item())


@dataclass
class UpdateMetrics:
    values: dict[str, float] = field(default_factory=dict)


class Actor:
    def __init__(
        self,
        model: torch.nn.Module,
        trainer: TrainerSection,
        algo: AlgorithmSection,
        temperature: float,
        ref_model: torch.nn.Module | None = None,
        enable_r3: bool = False,
    ):
        self.model = model
        self.replayer = RoutingReplayer(model) if enable_r3 else None
        self.trainer = trainer
        self.algo = algo
        self.temperature = temperature
        self.ref_model = ref_model
        self.policy_loss = policy_loss(algo.policy_loss_mode)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=trainer.lr, weight_decay=trainer.weight_decay, betas=(0.9, 0.999), eps=1e-8
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(trainer.lr_scheduler, trainer.warmup_steps, trainer.total_steps)
        )

    def _micro_batches(self, batch: TrainBatch) -> list[list[int]]:
        n, mb = batch.size, self.trainer.micro_batch_size
        return [list(range(i, min(i + mb, n))) for i in range(0, n, mb)]

    def _replay(self, mb: TrainBatch | None) -> None:
        """Point the R3 hooks at this micro-batch's recorded routing (None: route freely)."""
        if self.replayer is None:
            return
        if mb is None or mb.routed_experts is None:
            self.replayer.routing = None
            return
        r = self.replayer
        r.routing = routing_tensor(mb.routed_experts, mb.input_ids.shape[1], len(r.routers), r.routers[0].top_k)

    @torch.no_grad()
    def compute_logprobs(
        self, batch: TrainBatch, model: torch.nn.Module | None = None, replay: bool = True
    ) -> torch.Tensor:
        """Logprobs of the batch's tokens under `model` (default: the actor), no grad.
        With R3 on, the actor replays the recorded routing unless `replay=False`."""
        model = model or self.model
        out = torch.zeros_like(batch.mask)
        for idx in self._micro_batches(batch):
            mb = batch.select(idx)
            self._replay(mb if (replay and model is self.model) else None)
            try:
                lp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature)
            finally:
                self._replay(None)
            out[idx, : lp.shape[1]] = lp
        return out

    def update(
        self,
        batch: TrainBatch,
        advantages: torch.Tensor,
        old_logp: torch.Tensor,
        is_weights: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One policy update (ppo_epochs passes over the batch); returns actor/* metrics."""
        a = self.algo
        ref_logp = self.compute_logprobs(batch, self.ref_model) if (self.ref_model and a.kl_coef) else None
        agg = "seq-mean-token-mean" if a.policy_loss_mode == "gspo" else a.loss_agg_mode
        token_mode = agg == "token-mean"
        total = _all_sum(float(batch.mask.sum() if token_mode else (batch.mask.sum(-1) > 0).sum()))
        _, world = _world()
        sums = dict.fromkeys(["pg_loss", "entropy", "pg_clipfrac", "ppo_kl", "kl"], 0.0)
        grad_norms = []
        self.model.train(False)  # no dropout: training forward must match the sampler's numerics
        for _ in range(self.trainer.ppo_epochs):
            for idx in self._micro_batches(batch):
                mb = batch.select(idx)
                t = mb.input_ids.shape[1]
                weight = float(mb.mask.sum() if token_mode else (mb.mask.sum(-1) > 0).sum())
                if weight == 0:
                    continue
                frac = weight / max(total, 1.0)
                self._replay(mb)
                logp, ent = token_logprobs(
                    self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature, with_entropy=True
                )
                adv, old = advantages[idx, :t], old_logp[idx, :t]
                w = is_weights[idx, :t] if is_weights is not None else None
                pl = self.policy_loss(logp, old, adv, mb.mask, a, w, agg)
                entropy = aggregate(ent, mb.mask, agg)
                loss = pl.loss - a.entropy_coef * entropy
                if ref_logp is not None:
                    kl = aggregate(kl_penalty(logp, ref_logp[idx, :t]), mb.mask, agg)
                    loss = loss + a.kl_coef * kl
                    sums["kl"] += float(kl.detach()) * frac
                (loss * frac * world).backward()
                self._replay(None)
                sums["pg_loss"] += float(pl.loss.detach()) * frac
                sums["entropy"] += float(entropy.detach()) * frac
                sums["pg_clipfrac"] += pl.clipfrac * frac
                sums["ppo_kl"] += pl.ppo_kl * frac
            grad_norms.append(self._optimizer_step())
        self.scheduler.step()
        epochs = self.trainer.ppo_epochs
        metrics = {f"actor/{k}": _all_sum(v) / epochs for k, v in sums.items()}
        metrics["actor/grad_norm"] = sum(grad_norms) / len(grad_norms)
        metrics["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        return metrics

    def _optimizer_step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.trainer.max_grad_norm)
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Unsharded CPU weights for weight sync / export (gathers under FSDP2)."""
        _, world = _world()
        if world > 1:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach() for k, v in self.model.state_dict().items()}
