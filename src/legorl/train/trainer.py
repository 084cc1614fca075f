"""One policy update on a collated batch: old logprobs, fidelity, advantages, the actor (and critic) step.

`update` is synchronous and knows nothing of engines or weight versions: the loop pushes weights
after it. The step refuses a batch whose rollout-vs-trainer logprob gap exceeds the configured
threshold: such a gap means tokens or weights disagree between sampler and learner, and training on
it silently corrupts the policy. The trainer saves and loads its own state (`state_dict`), so the
loop never reaches into the optimizer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from legorl.config import AlgorithmSection, TrainerSection
from legorl.serving.adapter import is_adapter_key
from legorl.train.actor import Actor, world
from legorl.train.advantages import gae_advantages, mixed_group_rows, whiten
from legorl.train.batch import TrainBatch
from legorl.train.checkpoint import ShardWriter, read_weights, untie
from legorl.train.corrections import off_policy_correction
from legorl.train.critic import Critic
from legorl.train.fsdp import load_sharded, save_sharded
from legorl.train.logprobs import fidelity
from legorl.train.lora import ADAPTER_FILE, load_adapter
from legorl.train.memory import mini_batch_rows
from legorl.train.optim import keep_kernel
from legorl.train.registry import advantage_estimator


def routing_coverage(batch: TrainBatch) -> float:
    """Share of gradient tokens whose predicting position has a recorded routing in every layer."""
    if batch.routed_experts is None:
        return 0.0
    hit = total = 0
    for b in range(batch.size):
        r = batch.routed_experts[b]
        for t in torch.nonzero(batch.mask[b] > 0).flatten().tolist():
            total += 1
            if r is not None and t - 1 < len(r) and (r[t - 1] >= 0).all():
                hit += 1
    return hit / max(total, 1)


def _row_local_correction(algo: AlgorithmSection) -> bool:
    """The update anchors on the trainer's own old logprobs (the proximal policy) and its off-policy
    correction, if any, is a loss weight computed row by row (token / sequence / masked IS): no rejection,
    which changes the loss normalisation of the whole batch before the first micro-batch."""
    return algo.rollout_rs == "none" and algo.ppo_anchor == "proximal"


class LogprobMismatchError(RuntimeError):
    """Rollout and trainer logprobs disagree beyond `trainer.max_logprob_abs_diff`."""


class StepTrainer:
    """One process's trainer (under torch.distributed, one rank's: every rank runs `update` on the same
    batch and the actor takes its share of the rows).

    With one optimizer step (one epoch, one mini-batch), the proximal anchor and no rejection, the old
    (proximal) logprobs come from the gradient pass itself (`Actor.update_fused`) instead of a separate no-grad
    forward, in sync and async mode alike: the proximal policy is the weights before this update, whatever
    sampled the batch; importance weights are computed per micro-batch from those logprobs."""

    def __init__(self, algorithm: AlgorithmSection, trainer: TrainerSection, actor: Actor,
                 critic: Critic | None = None, pad_id: int = 0):
        self.algorithm = algorithm
        self.trainer = trainer
        self.actor = actor
        self.critic = critic
        self.pad_id = pad_id
        self.fused_old_logprobs = (trainer.fuse_old_logprob_pass and trainer.ppo_epochs == 1
                                   and _row_local_correction(algorithm) and actor.replayer is None)
        if algorithm.adv_estimator == "gae":
            if critic is None:
                raise ValueError("adv_estimator='gae' needs a critic")
            self.estimator = None
        else:
            self.estimator = advantage_estimator(algorithm.adv_estimator)

    def _check_fidelity(self, fid: dict[str, float]) -> None:
        limit = self.trainer.max_logprob_abs_diff
        if limit is not None and fid.get("rollout_corr/abs_diff_mean", 0.0) > limit:
            raise LogprobMismatchError(
                f"rollout vs trainer logprobs differ by {fid['rollout_corr/abs_diff_mean']:.3g} on average "
                f"(max {fid['rollout_corr/abs_diff_max']:.3g}), above trainer.max_logprob_abs_diff={limit}: "
                "the sampler and the trainer disagree on tokens or weights; refusing this batch"
            )

    def _advantages(self, batch: TrainBatch, metrics: dict[str, float]) -> torch.Tensor:
        mask = batch.mask
        if self.estimator is None:  # GAE: token-level, from the critic's values
            assert self.critic is not None
            values = self.critic.values(batch)
            adv, returns = gae_advantages(batch.rewards, values, mask, self.algorithm.gamma, self.algorithm.lam)
            metrics.update(self.critic.update(batch, values, returns))
            return whiten(adv, mask)
        seq_adv, gstats = self.estimator(batch.rewards, batch.group_ids, self.algorithm)
        metrics["grpo/zero_std_groups"] = float(gstats.zero_std_groups)
        metrics["grpo/num_groups"] = float(gstats.num_groups)
        return seq_adv.unsqueeze(-1) * mask

    def update(self, batch: TrainBatch) -> dict[str, float]:
        """One update on `batch` (trials with policy tokens); returns the step's trainer metrics."""
        if not self.algorithm.filter_groups:
            return self._update(batch.to(self.actor.device))
        keep = mixed_group_rows(batch.rewards, batch.group_ids)
        groups = set(batch.group_ids)
        # the whole batch's figures (they override the kept rows' own group counts)
        metrics = {"grpo/num_groups": float(len(groups)),
                   "grpo/zero_std_groups": float(len(groups) - len({batch.group_ids[i] for i in keep})),
                   "filter_groups/kept_rows": float(len(keep)), "filter_groups/dropped_rows": float(batch.size - len(keep))}
        if not keep:  # no mixed group: no signal, no optimizer step
            return {**metrics, "timing/update_s": 0.0, "actor/skipped": 1.0}
        kept = batch if len(keep) == batch.size else batch.select(keep)
        return {**self._update(kept.to(self.actor.device)), **metrics}

    def _update(self, batch: TrainBatch) -> dict[str, float]:
        """The update proper, on the rows it trains on."""
        metrics: dict[str, float] = {}
        mask = batch.mask
        # one optimizer step per update: the gradient pass's logprobs are the proximal policy's
        if self.fused_old_logprobs and len(mini_batch_rows(batch.group_ids, self.trainer.ppo_mini_batch_size)) == 1:
            adv = self._advantages(batch, metrics)
            t1 = time.perf_counter()

            algo = self.algorithm

            def gate(old_logp: torch.Tensor) -> None:
                fid = fidelity(old_logp, batch.behav_logp, mask)
                metrics.update(fid)
                self._check_fidelity(fid)
                if algo.rollout_is != "none":  # the correction's metrics over the whole batch
                    metrics.update(off_policy_correction(old_logp, batch.behav_logp, mask, algo).metrics)

            def weights_for(old: torch.Tensor, idx: torch.Tensor, t: int) -> torch.Tensor | None:
                return off_policy_correction(old, batch.behav_logp[idx, :t], mask[idx, :t], algo).weights

            actor_metrics, _ = self.actor.update_fused(
                batch, adv, gate, weights_for if algo.rollout_is != "none" else None)
            metrics.update(actor_metrics)
            metrics["timing/old_logprob_s"] = 0.0
        else:
            t0 = time.perf_counter()
            old_logp = self.actor.compute_logprobs(batch)
            fid = fidelity(old_logp, batch.behav_logp, mask)
            metrics.update(fid)
            if self.actor.replayer is not None:
                metrics["r3/routing_coverage"] = routing_coverage(batch)
                free = self.actor.compute_logprobs(batch, replay=False)
                metrics.update({k.replace("rollout_corr/", "rollout_corr_no_r3/"): v
                                for k, v in fidelity(free, batch.behav_logp, mask).items()})
            metrics["timing/old_logprob_s"] = time.perf_counter() - t0
            self._check_fidelity(fid)
            adv = self._advantages(batch, metrics)
            algo = self.algorithm
            corr = off_policy_correction(old_logp, batch.behav_logp, mask, algo)  # docs/async.md: corrections
            metrics.update(corr.metrics)
            anchor = old_logp if algo.ppo_anchor == "proximal" else batch.behav_logp
            upd = batch if corr.mask is mask else replace(batch, mask=corr.mask)
            t1 = time.perf_counter()
            metrics.update(self.actor.update(upd, adv, anchor, corr.weights))
        metrics["timing/update_s"] = time.perf_counter() - t1
        metrics["critic/advantages/mean"] = float((adv * mask).sum() / mask.sum().clamp(min=1))
        lengths = mask.sum(-1)
        metrics["response_length/mean"] = float(lengths.mean())
        metrics["response_length/max"] = float(lengths.max())
        if batch.prompt_lens:
            metrics["prompt_length/mean"] = float(sum(batch.prompt_lens) / len(batch.prompt_lens))
        return metrics

    # -- weights and state ------------------------------------------------------------------------
    def stream_weights(self, emit: Callable[[dict[str, torch.Tensor]], None]) -> int:
        """The policy's full weights to `emit` in buckets (gathered one tensor at a time under FSDP2)."""
        return self.actor.stream_weights(emit, self.trainer.weight_bucket_mb << 20)

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's full weights in one dict (tests, tools; the loop streams them)."""
        return self.actor.full_state_dict()

    def _rest(self) -> dict[str, Any]:
        """Everything but the policy weights that a resumed run needs: optimizer, LR schedule, critic."""
        state: dict[str, Any] = {"optimizer": self.actor.optimizer.state_dict(),
                                 "scheduler": self.actor.scheduler.state_dict()}
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic.optimizer.state_dict()
        return state

    def save(self, directory: Path) -> None:
        """One process: model.safetensors + optim.pt. A rank of N: every rank writes its shards of model
        and optimizer (torch.distributed.checkpoint, `dcp/`), rank 0 the HF weight shards and schedule."""
        rank, n_ranks = world()
        if n_ranks == 1 and self.actor.lora:  # the adapter and its optimizer state, never the base
            save_file(self.weights(), str(directory / ADAPTER_FILE))
            torch.save(self._rest(), directory / "optim.pt")
            return
        if n_ranks == 1:
            save_file(untie(self.weights()), str(directory / "model.safetensors"))
            torch.save(self._rest(), directory / "optim.pt")
            return
        if self.actor.lora:  # rank 0: the gathered adapter; every rank: its shards of adapter and optimizer
            adapter = self.weights()
            if rank == 0:
                save_file(adapter, str(directory / ADAPTER_FILE))
            save_sharded(self.actor.model, self.actor.optimizer, directory / "dcp", only=is_adapter_key)
            if rank == 0:
                torch.save({"scheduler": self.actor.scheduler.state_dict()}, directory / "optim.pt")
            torch.distributed.barrier()
            return
        writer = ShardWriter(directory) if rank == 0 else None
        self.stream_weights(writer or (lambda _bucket: None))
        save_sharded(self.actor.model, self.actor.optimizer, directory / "dcp")
        if writer is not None:
            writer.close()
            torch.save({"scheduler": self.actor.scheduler.state_dict()}, directory / "optim.pt")
        torch.distributed.barrier()

    def load(self, directory: Path) -> None:
        _, n_ranks = world()
        state = torch.load(directory / "optim.pt", weights_only=False, map_location="cpu")
        if n_ranks > 1:
            if not (directory / "dcp").is_dir():
                raise ValueError(f"{directory} was written by one trainer process: resume it with trainer.n_ranks = 1")
            if self.actor.lora != (directory / ADAPTER_FILE).is_file():
                raise ValueError(f"{directory} was written {'without' if self.actor.lora else 'with'} a LoRA "
                                 "adapter: resume with the same model.lora.rank")
            keep_kernel(self.actor.optimizer, lambda: load_sharded(
                self.actor.model, self.actor.optimizer, directory / "dcp", only=is_adapter_key if self.actor.lora else None))
        else:
            if (directory / "dcp").is_dir():
                raise ValueError(f"{directory} was written by sharded trainer ranks: resume with the same trainer.n_ranks")
            if self.actor.lora != (directory / ADAPTER_FILE).is_file():
                raise ValueError(f"{directory} was written {'without' if self.actor.lora else 'with'} a LoRA "
                                 "adapter: resume with the same model.lora.rank")
            if self.actor.lora:
                load_adapter(self.actor.model, load_file(str(directory / ADAPTER_FILE)))
            for part in ([] if self.actor.lora else read_weights(directory)):
                self.actor.model.load_state_dict(part, strict=False)
            keep_kernel(self.actor.optimizer, lambda: self.actor.optimizer.load_state_dict(state["optimizer"]))
        self.actor.scheduler.load_state_dict(state["scheduler"])
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            keep_kernel(self.critic.optimizer, lambda: self.critic.optimizer.load_state_dict(state["critic_optimizer"]))

    def close(self) -> None:
        """Nothing to release in-process (trainer ranks in other processes stop here)."""
