"""One training step: rollouts -> advantages -> policy update -> weight sync, with the field's metrics.

The step refuses a batch whose rollout-vs-trainer logprob gap exceeds the configured threshold:
such a gap means tokens or weights disagree between sampler and learner, and training on it
silently corrupts the policy.
"""

from __future__ import annotations

import time

import torch

from legorl.config import RunConfig
from legorl.rollout import Rollout
from legorl.serving.weight_sync import WeightSync
from legorl.train.actor import Actor
from legorl.train.advantages import gae_advantages, grpo_advantages, rloo_advantages, whiten
from legorl.train.batch import collate
from legorl.train.critic import Critic
from legorl.train.logprobs import fidelity
from legorl.train.losses import rollout_is_weights


def routing_coverage(batch) -> float:
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


class LogprobMismatchError(RuntimeError):
    """Rollout and trainer logprobs disagree beyond `trainer.max_logprob_abs_diff`."""


class StepTrainer:
    def __init__(self, cfg: RunConfig, actor: Actor, weight_sync: WeightSync | None, critic: Critic | None = None,
                 pad_id: int = 0):
        self.cfg = cfg
        self.actor = actor
        self.weight_sync = weight_sync
        self.critic = critic
        self.pad_id = pad_id
        if cfg.algorithm.adv_estimator == "gae" and critic is None:
            raise ValueError("adv_estimator='gae' needs a critic")

    async def step(self, rollouts: list[Rollout]) -> dict[str, float]:
        """Update on `rollouts` (already filtered); returns metrics. Syncs weights when done."""
        a, t = self.cfg.algorithm, self.cfg.trainer
        metrics: dict[str, float] = {}
        rewards = torch.tensor([r.reward for r in rollouts], dtype=torch.float32)
        metrics.update({
            "critic/score/mean": float(rewards.mean()) if len(rollouts) else 0.0,
            "critic/score/max": float(rewards.max()) if len(rollouts) else 0.0,
            "critic/score/min": float(rewards.min()) if len(rollouts) else 0.0,
        })
        trainable = [r for r in rollouts if r.num_policy_tokens > 0]
        if not trainable:
            metrics["actor/skipped"] = 1.0
            return metrics
        t0 = time.perf_counter()
        batch = collate(trainable, self.pad_id)
        old_logp = self.actor.compute_logprobs(batch)
        fid = fidelity(old_logp, batch.behav_logp, batch.mask)
        metrics.update(fid)
        if self.actor.replayer is not None:
            metrics["r3/routing_coverage"] = routing_coverage(batch)
            free = self.actor.compute_logprobs(batch, replay=False)
            metrics.update({k.replace("rollout_corr/", "rollout_corr_no_r3/"): v
                            for k, v in fidelity(free, batch.behav_logp, batch.mask).items()})
        metrics["timing/old_logprob_s"] = time.perf_counter() - t0
        limit = t.max_logprob_abs_diff
        if limit is not None and fid.get("rollout_corr/abs_diff_mean", 0.0) > limit:
            raise LogprobMismatchError(
                f"rollout vs trainer logprobs differ by {fid['rollout_corr/abs_diff_mean']:.3g} on average "
                f"(max {fid['rollout_corr/abs_diff_max']:.3g}), above trainer.max_logprob_abs_diff={limit}: "
                "the sampler and the trainer disagree on tokens or weights; refusing this batch"
            )
        mask = batch.mask
        if a.adv_estimator == "gae":
            assert self.critic is not None
            values = self.critic.values(batch)
            adv, returns = gae_advantages(batch.rewards, values, mask, a.gamma, a.lam)
            adv = whiten(adv, mask)
            metrics.update(self.critic.update(batch, values, returns))
        else:
            est = grpo_advantages if a.adv_estimator == "grpo" else rloo_advantages
            kwargs = {"norm_by_std": a.norm_adv_by_std} if a.adv_estimator == "grpo" else {}
            seq_adv, gstats = est(batch.rewards, batch.group_ids, **kwargs)
            adv = seq_adv.unsqueeze(-1) * mask
            metrics["grpo/zero_std_groups"] = float(gstats.zero_std_groups)
            metrics["grpo/num_groups"] = float(gstats.num_groups)
        metrics["critic/advantages/mean"] = float((adv * mask).sum() / mask.sum().clamp(min=1))
        isw = rollout_is_weights(old_logp, batch.behav_logp, mask, a.rollout_is, a.rollout_is_threshold)
        if isw is not None:
            metrics["rollout_is/ess"] = isw.ess
        t1 = time.perf_counter()
        metrics.update(self.actor.update(batch, adv, old_logp, isw.weights if isw is not None else None))
        metrics["timing/update_s"] = time.perf_counter() - t1
        lengths = mask.sum(-1)
        metrics["response_length/mean"] = float(lengths.mean())
        metrics["response_length/max"] = float(lengths.max())
        metrics["prompt_length/mean"] = float(sum(r.prompt_len for r in trainable) / len(trainable))
        if self.weight_sync is not None:
            t2 = time.perf_counter()
            version = await self.weight_sync.push(self.actor.full_state_dict())
            metrics["timing/weight_sync_s"] = time.perf_counter() - t2
            metrics["weight_version"] = float(version)
        return metrics
