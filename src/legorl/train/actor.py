"""The actor: recompute logprobs, take policy-gradient steps over micro-batches, hand out weights.

Works unchanged on one process and under torch.distributed: every rank receives the whole batch,
trains on its share of the rows (balanced by tokens), and weights its loss by the *global* token /
sequence count, so the sharded step equals the single-process one. FSDP2 runs collectives in every
forward, so each rank runs the same number of micro-batches (a rank short of rows runs a zero-weight
one). Micro-batches are a fixed row count or packed by a token budget (`trainer.max_tokens_per_micro_batch`).
With `trainer.share_prefix` a group's rows stay in one micro-batch (and on one rank) and their common
prefix is forwarded once (train/prefix.py): the same loss and gradients, fewer tokens computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from legorl.config import AlgorithmSection, TrainerSection
from legorl.models.moe import RoutingReplayer, routing_tensor
from legorl.train.batch import TrainBatch
from legorl.train.device import autocast
from legorl.train.logprobs import token_logprobs
from legorl.train.lora import adapter_state, is_lora
from legorl.train.losses import aggregate, kl_penalty
from legorl.train.memory import (
    balance_groups,
    balance_rows,
    fixed_micro_batches,
    group_micro_batches,
    mini_batch_rows,
    padding_ratio,
    set_activation_checkpointing,
    shared_cost,
    token_budget_micro_batches,
)
from legorl.train.optim import adamw
from legorl.train.prefix import Level, group_prefix_lengths, plan_prefixes, routing_for
from legorl.train.registry import policy_loss
from legorl.train.schedule import lr_lambda

if TYPE_CHECKING:
    from legorl.train.demo_replay import DemoReplay


def world() -> tuple[int, int]:
    """(rank, world size) of the trainer's process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_sum(values: dict[str, float]) -> dict[str, float]:
    """Sum scalars over the ranks (one collective for the whole dict)."""
    if world()[1] == 1 or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return dict(zip(keys, t.cpu().tolist(), strict=True))


def _block(name: str) -> str:
    """The module a parameter belongs to, up to its layer index (`model.layers.3.`): buckets end there."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1])


@dataclass
class Plan:
    """This rank's micro-batches (None: a zero-weight filler that keeps FSDP ranks in step) and the
    padding share of the whole step's micro-batches, all ranks together."""

    mine: list[list[int] | None]
    padding_ratio: float
    computed_share: float = 1.0  # positions forwarded / row tokens (below 1: shared prefixes)


class Actor:
    def __init__(
        self,
        model: torch.nn.Module,
        trainer: TrainerSection,
        algo: AlgorithmSection,
        temperature: float,
        ref_model: torch.nn.Module | None = None,
        enable_r3: bool = False,
        device: torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        sharded: bool = False,
        recompute_over: int | None = None,
        demos: DemoReplay | None = None,
    ):
        self.model = model
        self.demos = demos  # warm_start.rl_nll_coef: demonstrations whose NLL joins every optimizer step
        # model.gradient_checkpointing = "long_rows": only a micro-batch longer than this is recomputed
        self.recompute_over = recompute_over
        self.replayer = RoutingReplayer(model) if enable_r3 else None
        self.trainer = trainer
        self.algo = algo
        self.temperature = temperature
        self.ref_model = ref_model
        self.device = device or torch.device("cpu")
        self.dtype = dtype
        self.autocast = not sharded  # under FSDP2 the MixedPrecisionPolicy casts the parameters
        self.policy_loss = policy_loss(algo.policy_loss_mode)
        self.params = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapter only
        self.lora = is_lora(model)
        self.optimizer = adamw(self.params, lr=trainer.lr, weight_decay=trainer.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(trainer.lr_scheduler, trainer.warmup_steps, trainer.total_steps)
        )

    # -- micro-batches -----------------------------------------------------------------------------
    def plan(self, batch: TrainBatch) -> Plan:
        lengths = batch.attention_mask.sum(-1).tolist()
        rank, n_ranks = world()
        budget = self.trainer.max_tokens_per_micro_batch
        if self.trainer.share_prefix:
            prefix = group_prefix_lengths(batch.input_ids, batch.attention_mask, batch.group_ids)
            groups = batch.group_ids
            shares = (balance_groups(lengths, prefix, groups, n_ranks) if n_ranks > 1
                      else [list(range(batch.size))])
            plans = [group_micro_batches(lengths, prefix, groups, s, budget, self.trainer.micro_batch_size)
                     for s in shares]
            computed = sum(shared_cost(lengths, prefix, groups, mb) for p in plans for mb in p)
        else:
            shares = balance_rows(lengths, n_ranks) if n_ranks > 1 else [list(range(batch.size))]
            plans = [token_budget_micro_batches(lengths, s, budget) if budget
                     else fixed_micro_batches(s, self.trainer.micro_batch_size) for s in shares]
            computed = sum(len(mb) * max(lengths[i] for i in mb) for p in plans for mb in p if mb)
        n_mb = max(len(p) for p in plans)
        mine: list[list[int] | None] = [*plans[rank], *[None] * (n_mb - len(plans[rank]))]
        return Plan(mine, padding_ratio(lengths, [mb for p in plans for mb in p]),
                    computed / max(1, sum(lengths)))

    def _micro(self, batch: TrainBatch, plan: Plan) -> Iterator[tuple[list[int], TrainBatch, bool]]:
        """(rows, micro-batch on the device, is_filler) for this rank's plan."""
        for idx in plan.mine:
            rows = idx if idx is not None else [0]
            yield rows, batch.select(rows).to(self.device), idx is None

    def _replay(self, mb: TrainBatch | None) -> None:
        """Point the R3 hooks at this micro-batch's recorded routing (None: route freely)."""
        if self.replayer is None:
            return
        if mb is None or mb.routed_experts is None:
            self.replayer.routing = None
            return
        r = self.replayer
        r.routing = routing_tensor(mb.routed_experts, mb.input_ids.shape[1], len(r.routers), r.routers[0].top_k)

    def _forward(self, model: torch.nn.Module, mb: TrainBatch, with_entropy: bool = False, replay: bool = False,
                 temperature: float | None = None):
        """Logprobs (and entropy) of a micro-batch; `replay`: the actor replays its recorded routing;
        `temperature`: None for the sampler's."""
        prefix, on_level = None, None
        if self.trainer.share_prefix:
            replayer = self.replayer if model is self.model else None
            routed = mb.routed_experts if (replay and replayer is not None) else None
            # a prefix shared under R3 must also route alike in every row: its routing joins the match
            prefix = plan_prefixes(mb.input_ids, mb.attention_mask, mb.group_ids, routed,
                                   fixed_levels=world()[1] > 1)
            if replayer is not None:
                r = replayer

                def on_level(level: Level) -> None:
                    r.routing = (routing_for(level, routed, len(r.routers), r.routers[0].top_k)
                                 if routed is not None else None)
        with autocast(self.device, self.dtype, self.autocast):
            return token_logprobs(model, mb.input_ids, mb.attention_mask, mb.mask,
                                  self.temperature if temperature is None else temperature,
                                  with_entropy=with_entropy, prefix=prefix, on_level=on_level)

    @torch.no_grad()
    def compute_logprobs(
        self, batch: TrainBatch, model: torch.nn.Module | None = None, replay: bool = True
    ) -> torch.Tensor:
        """Logprobs of the batch's tokens under `model` (default: the actor), no grad, on every rank.
        With R3 on, the actor replays the recorded routing unless `replay=False`."""
        model = model or self.model
        out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=self.device)
        for idx, mb, filler in self._micro(batch, self.plan(batch)):
            replaying = replay and model is self.model
            self._replay(mb if replaying else None)
            try:
                lp, _ = self._forward(model, mb, replay=replaying)
            finally:
                self._replay(None)
            if not filler:
                out[idx, : lp.shape[1]] = lp
        if world()[1] > 1:  # each rank filled its own rows: the sum is the whole batch
            dist.all_reduce(out)
        return out

    # -- the update --------------------------------------------------------------------------------
    def update(
        self,
        batch: TrainBatch,
        advantages: torch.Tensor,
        old_logp: torch.Tensor,
        is_weights: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One policy update against `old_logp`: `ppo_epochs` passes over the batch, each an optimizer step per
        mini-batch of `ppo_mini_batch_size` groups (one for the whole batch when unset); returns actor/* metrics."""
        return self._update(batch, advantages, old_logp, is_weights)[0]

    def update_fused(
        self, batch: TrainBatch, advantages: torch.Tensor,
        before_step: Callable[[torch.Tensor], None] | None = None,
        weights_for: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor | None] | None = None,
    ) -> tuple[dict[str, float], torch.Tensor]:
        """The update (one epoch) with the proximal policy's logprobs, the weights before this update, taken
        detached from the gradient pass itself: that forward is the one a separate old-logprob pass would run,
        so the ratio is exactly 1 and the update is the same with one forward fewer. `weights_for(old, idx, t)`
        gives a micro-batch's loss weights from its detached logprobs (a row-local off-policy correction: the
        rows `idx`, the first `t` positions). `before_step(old)` runs before the optimizer step (the fidelity
        gate); if it raises, the gradients are dropped. Returns the metrics and the old logprobs."""
        metrics, first = self._update(batch, advantages, None, None, before_step, weights_for)
        assert first is not None
        return metrics, first

    def _update(
        self,
        batch: TrainBatch,
        advantages: torch.Tensor,
        old_logp: torch.Tensor | None,
        is_weights: torch.Tensor | None,
        before_step: Callable[[torch.Tensor], None] | None = None,
        weights_for: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor | None] | None = None,
    ) -> tuple[dict[str, float], torch.Tensor | None]:
        a = self.algo
        fused = old_logp is None
        minis = mini_batch_rows(batch.group_ids, self.trainer.ppo_mini_batch_size)
        if fused and (self.trainer.ppo_epochs != 1 or len(minis) != 1):
            raise ValueError("logprobs from the gradient pass need one optimizer step (ppo_epochs == 1, one mini-batch)")
        ref_logp = self.compute_logprobs(batch, self.ref_model) if (self.ref_model and a.kl_coef) else None
        first = torch.zeros(batch.mask.shape, dtype=torch.float32, device=self.device) if fused else None
        sums = dict.fromkeys(["pg_loss", "entropy", "pg_clipfrac", "ppo_kl", "kl"], 0.0)
        if self.demos is not None:
            sums["demo_nll"] = 0.0
        done_updates = self.scheduler.last_epoch  # updates before this one: which demonstrations come next
        grad_norms = []
        plan = self.plan(batch)
        n_steps = self.trainer.ppo_epochs * len(minis)
        self.model.train(False)  # no dropout: training forward must match the sampler's numerics
        for epoch in range(self.trainer.ppo_epochs):
            for j, rows in enumerate(minis):
                whole = len(rows) == batch.size
                part = batch if whole else batch.select(rows)

                def cut(x: torch.Tensor | None, rows: list[int] = rows, whole: bool = whole) -> torch.Tensor | None:
                    return x if (x is None or whole) else x[rows]

                self._accumulate(part, cut(advantages), cut(old_logp), cut(is_weights), cut(ref_logp),
                                 plan if whole else self.plan(part), first, weights_for, sums, 1.0 / n_steps)
                if first is not None:
                    if world()[1] > 1:
                        dist.all_reduce(first)
                    if before_step is not None:
                        try:
                            before_step(first)
                        except Exception:
                            self.optimizer.zero_grad(set_to_none=True)
                            raise
                if self.demos is not None:
                    k = (done_updates * self.trainer.ppo_epochs + epoch) * len(minis) + j
                    self._accumulate_demos(self.demos.batch(k), sums, 1.0 / n_steps)
                grad_norms.append(self._optimizer_step())
        self.scheduler.step()
        metrics = {f"actor/{k}": v for k, v in all_sum(sums).items()}
        metrics["actor/grad_norm"] = sum(grad_norms) / len(grad_norms)
        metrics["actor/optimizer_steps"] = float(n_steps)
        metrics["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        metrics["perf/padding_ratio"] = plan.padding_ratio
        metrics["perf/computed_token_share"] = plan.computed_share
        return metrics, first

    def _accumulate(
        self, batch: TrainBatch, advantages: torch.Tensor, old_logp: torch.Tensor | None,
        is_weights: torch.Tensor | None, ref_logp: torch.Tensor | None, plan: Plan, first: torch.Tensor | None,
        weights_for: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor | None] | None,
        sums: dict[str, float], share: float,
    ) -> None:
        """Forward/backward every micro-batch of one optimizer step's rows, their loss weighted by the step's
        global token (or sequence) count; `sums` gathers the metrics, each step counting `share`."""
        a = self.algo
        _, n_ranks = world()
        agg = "seq-mean-token-mean" if a.policy_loss_mode == "gspo" else a.loss_agg_mode
        token_mode = agg == "token-mean"
        total = float(batch.mask.sum() if token_mode else (batch.mask.sum(-1) > 0).sum())
        for idx, mb, filler in self._micro(batch, plan):
            t = mb.input_ids.shape[1]
            weight = 0.0 if filler else float(mb.mask.sum() if token_mode else (mb.mask.sum(-1) > 0).sum())
            if weight == 0 and n_ranks == 1:
                continue
            frac = weight / max(total, 1.0)
            if self.recompute_over is not None:  # only a row over the token budget (it trains alone)
                set_activation_checkpointing(self.model, t > self.recompute_over)
            self._replay(mb)
            logp, ent = self._forward(self.model, mb, with_entropy=True, replay=True)
            if first is not None:
                old = logp.detach()
                if not filler:
                    first[idx, :t] = old
                w = weights_for(old, idx, t) if weights_for is not None else None
            else:
                assert old_logp is not None
                old = old_logp[idx, :t].to(self.device)
                w = is_weights[idx, :t].to(self.device) if is_weights is not None else None
            adv = advantages[idx, :t].to(self.device)
            pl = self.policy_loss(logp, old, adv, mb.mask, a, w, agg)
            entropy = aggregate(ent, mb.mask, agg)
            loss = pl.loss - a.entropy_coef * entropy
            if ref_logp is not None:
                kl = aggregate(kl_penalty(logp, ref_logp[idx, :t]), mb.mask, agg)
                loss = loss + a.kl_coef * kl
                sums["kl"] += float(kl.detach()) * frac * share
            # FSDP2 averages gradients over the ranks: scale back up to a sum
            (loss * frac * n_ranks).backward()
            self._replay(None)
            sums["pg_loss"] += float(pl.loss.detach()) * frac * share
            sums["entropy"] += float(entropy.detach()) * frac * share
            sums["pg_clipfrac"] += pl.clipfrac * frac * share
            sums["ppo_kl"] += pl.ppo_kl * frac * share

    def _accumulate_demos(self, batch: TrainBatch, sums: dict[str, float], share: float) -> None:
        """Forward/backward the demonstrations' token-mean NLL (at temperature 1, the warm start's objective),
        times `warm_start.rl_nll_coef`, into this optimizer step's gradients."""
        assert self.demos is not None
        _, n_ranks = world()
        total = max(float(batch.mask.sum()), 1.0)
        for _, mb, filler in self._micro(batch, self.plan(batch)):
            if filler and n_ranks == 1:
                continue
            if self.recompute_over is not None:
                set_activation_checkpointing(self.model, mb.input_ids.shape[1] > self.recompute_over)
            logp, _ = self._forward(self.model, mb, temperature=1.0)
            nll = -(logp * mb.mask).sum() / total * (0.0 if filler else 1.0)
            # FSDP2 averages gradients over the ranks: scale back up to a sum
            (nll * self.demos.coef * n_ranks).backward()
            sums["demo_nll"] += float(nll.detach()) * share

    def _optimizer_step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.trainer.max_grad_norm)
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # -- weights -----------------------------------------------------------------------------------
    def stream_weights(self, emit: Callable[[dict[str, torch.Tensor]], None], bucket_bytes: int = 256 << 20) -> int:
        """Hand the full (unsharded) weights to `emit` in buckets of about `bucket_bytes`; returns bytes.

        Under FSDP2 every rank takes part (one parameter gathered at a time) and rank 0 emits CPU copies:
        no process ever holds a second full copy of the model. In one process the buckets are views.
        With a LoRA adapter only the adapter goes (one bucket; the replicas merge it onto their base)."""
        rank, n_ranks = world()
        if self.lora:
            adapter = adapter_state(self.model)
            if rank == 0:
                emit(adapter)
            return sum(v.numel() * v.element_size() for v in adapter.values())
        bucket: dict[str, torch.Tensor] = {}
        size = total = 0
        for name, value in self.model.state_dict().items():
            if hasattr(value, "full_tensor"):
                value = value.full_tensor()
            value = value.detach()
            if rank != 0:
                continue
            # cut only between blocks: vLLM reloads fused modules (q/k/v, gate/up) from one update
            if size >= bucket_bytes and _block(name) != _block(next(reversed(bucket))):
                emit(bucket)
                total += size
                bucket, size = {}, 0
            if n_ranks > 1 or value.device.type != "cpu":
                value = value.to("cpu", copy=True)
            bucket[name] = value
            size += value.numel() * value.element_size()
        if bucket:
            emit(bucket)
            total += size
        return total

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole unsharded model on CPU (export, tests): the stream collected into one dict."""
        out: dict[str, torch.Tensor] = {}
        self.stream_weights(out.update)
        return out
