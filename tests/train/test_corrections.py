"""Off-policy corrections: each mode against a hand-computed case; masked tokens give no gradient;
each mode reached from the config through build_trainer's StepTrainer."""

from __future__ import annotations

import math

import pytest
import torch

from legorl.config import AlgorithmSection, ConfigError, load_config
from legorl.train.corrections import off_policy_correction
from legorl.train.losses import ppo_loss

LN = math.log


def algo(**kw) -> AlgorithmSection:
    return AlgorithmSection(**kw)


# one rollout of 4 policy tokens (position 4 is padding); token ratios r = old / behav = 0.25, 0.8, 1.5, 4
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
OLD = torch.zeros(1, 5)
BEHAV = torch.tensor([[-LN(0.25), -LN(0.8), -LN(1.5), -LN(4.0), 0.0]]) * MASK


def test_token_truncated_is():
    c = off_policy_correction(OLD, BEHAV, MASK, algo(rollout_is="token", rollout_is_threshold=2.0))
    assert torch.allclose(c.weights, torch.tensor([[0.25, 0.8, 1.5, 2.0, 0.0]]))
    assert c.mask is MASK
    w = torch.tensor([0.25, 0.8, 1.5, 2.0])
    assert c.metrics["rollout_is/ess"] == pytest.approx(float(w.sum() ** 2 / (4 * (w**2).sum())))
    assert c.metrics["rollout_corr/ratio_max"] == pytest.approx(4.0)


def test_masked_is_drops_tokens_outside_the_range_and_keeps_true_ratios():
    c = off_policy_correction(OLD, BEHAV, MASK, algo(rollout_is="masked", rollout_is_low=0.5, rollout_is_threshold=2.0))
    assert torch.allclose(c.weights, torch.tensor([[0.0, 0.8, 1.5, 0.0, 0.0]]))  # 0.25 < 0.5, 4 > 2: dropped
    assert c.mask is MASK  # still in the normalisation
    assert c.metrics["rollout_is/masked_frac"] == pytest.approx(0.5)
    # ESS over the 4 policy tokens: (0.8 + 1.5)^2 / (4 (0.64 + 2.25)) = 5.29 / 11.56
    assert c.metrics["rollout_is/ess"] == pytest.approx(5.29 / 11.56, rel=1e-5)


def test_two_sided_token_rejection_changes_the_mask_not_the_weights():
    c = off_policy_correction(OLD, BEHAV, MASK, algo(rollout_rs="token", rollout_rs_low=0.5, rollout_rs_high=2.0))
    assert c.weights is None
    assert torch.equal(c.mask, torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0]]))
    assert c.metrics["rollout_rs/masked_frac"] == pytest.approx(0.5)
    assert c.metrics["rollout_rs/rejected_frac"] == 0.0


def test_geometric_rejection_drops_whole_rollouts():
    # row 0: geometric mean of (0.25, 0.8, 1.5, 4) = (1.2)^(1/4) ~ 1.047; row 1: ratios 2, 2 -> 2
    mask = torch.cat([MASK, torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]])])
    behav = torch.cat([BEHAV, torch.tensor([[-LN(2.0), -LN(2.0), 0.0, 0.0, 0.0]])])
    old = torch.zeros(2, 5)
    a = algo(rollout_rs="geometric", rollout_rs_low=0.9, rollout_rs_high=1.1)
    c = off_policy_correction(old, behav, mask, a)
    assert torch.equal(c.mask, torch.cat([MASK, torch.zeros(1, 5)]))
    assert c.metrics["rollout_rs/rejected_frac"] == pytest.approx(0.5)
    assert c.metrics["rollout_rs/masked_frac"] == pytest.approx(2 / 6)
    tight = off_policy_correction(old, behav, mask, a.model_copy(update={"rollout_rs_high": 1.04}))
    assert tight.mask.sum() == 0  # 1.2 ** 0.25 = 1.0466 > 1.04: row 0 goes too


def test_corrections_compose_and_is_weights_follow_the_rejected_mask():
    a = algo(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token", rollout_rs_low=0.5, rollout_rs_high=2.0)
    c = off_policy_correction(OLD, BEHAV, MASK, a)
    assert torch.allclose(c.weights, torch.tensor([[0.0, 0.8, 1.5, 0.0, 0.0]]))
    assert c.metrics["rollout_is/weight_mean"] == pytest.approx(1.15)


@pytest.mark.parametrize("a", [
    algo(rollout_is="masked", rollout_is_low=0.5, rollout_is_threshold=2.0),
    algo(rollout_rs="token", rollout_rs_low=0.5, rollout_rs_high=2.0),
])
def test_masked_tokens_contribute_no_gradient(a):
    c = off_policy_correction(OLD, BEHAV, MASK, a)
    logp = torch.full((1, 5), -0.1, requires_grad=True)
    adv = torch.ones(1, 5) * MASK
    out = ppo_loss(logp, OLD, adv, c.mask, 0.2, 0.28, weights=c.weights)
    out.loss.backward()
    g = logp.grad[0]
    assert g[0] == 0 and g[3] == 0 and g[4] == 0  # ratios 0.25 and 4 masked, 4 is padding
    assert g[1] != 0 and g[2] != 0


def test_decoupled_vs_coupled_anchor_on_stale_tokens():
    """Decoupled: the ratio is against the proximal policy (1 at the first step: nothing clips, the
    gap proximal/behaviour is the IS weight). Coupled: the ratio is against the stale behaviour, 1.5 > 1.28
    clips, and the clipped token has no gradient."""
    logp = torch.zeros(1, 2, requires_grad=True)  # current == proximal (first optimizer step)
    behav = torch.tensor([[-LN(1.5), 0.0]])
    mask, adv = torch.ones(1, 2), torch.ones(1, 2)
    c = off_policy_correction(torch.zeros(1, 2), behav, mask, algo(rollout_is="token", rollout_is_threshold=2.0))
    dec = ppo_loss(logp, torch.zeros(1, 2), adv, mask, 0.2, 0.28, weights=c.weights)
    assert dec.loss.item() == pytest.approx(-(1.5 + 1.0) / 2) and dec.clipfrac == 0.0
    dec.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.75, -0.5]]))
    logp.grad = None
    cop = ppo_loss(logp, behav, adv, mask, 0.2, 0.28)
    assert cop.loss.item() == pytest.approx(-(1.28 + 1.0) / 2) and cop.clipfrac == 0.5
    cop.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5]]))


def test_config_refuses_inconsistent_corrections():
    with pytest.raises(ConfigError, match="correct twice"):
        load_config(None, ["algorithm.ppo_anchor=behaviour", "algorithm.rollout_is=token"])
    with pytest.raises(ConfigError, match="rollout_rs_low < rollout_rs_high"):
        load_config(None, ["algorithm.rollout_rs=token", "algorithm.rollout_rs_low=3"])
    cfg = load_config(None, ["async_training.enabled=true", "algorithm.ppo_anchor=behaviour"])
    assert cfg.effective_rollout_is() == "none"  # the coupled ratio is the correction


class _Actor:
    """Records what StepTrainer hands the actor."""

    replayer = None
    device = torch.device("cpu")

    def __init__(self, logp):
        self.logp, self.seen = logp, {}

    def compute_logprobs(self, batch, model=None, replay=True):
        return self.logp.clone()

    def update(self, batch, adv, old, w):
        self.seen = {"mask": batch.mask.clone(), "old": old.clone(), "w": w, "fused": False}
        return {}

    def update_fused(self, batch, adv, before_step=None, weights_for=None):
        """The gradient pass's logprobs are `logp`; one micro-batch of every row."""
        old = self.logp.clone()
        w = weights_for(old, torch.arange(old.shape[0]), old.shape[1]) if weights_for is not None else None
        self.seen = {"mask": batch.mask.clone(), "old": old, "w": w, "fused": True}
        if before_step is not None:
            before_step(old)
        return {}, old


@pytest.mark.parametrize("keys, check", [
    (["algorithm.rollout_rs=token"], lambda s, m: torch.equal(s["mask"], torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]))
     and m["rollout_rs/masked_frac"] == pytest.approx(2 / 3)),
    (["algorithm.rollout_is=masked", "algorithm.rollout_is_threshold=1.5"],
     lambda s, m: torch.allclose(s["w"], torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]))),
    (["algorithm.ppo_anchor=behaviour"], lambda s, m: torch.equal(s["old"], BEHAV2) and s["w"] is None),
    (["async_training.enabled=true"], lambda s, m: torch.equal(s["old"], torch.zeros(1, 5))
     and torch.allclose(s["w"], torch.tensor([[0.0, 0.25, 2.0, 1.0, 0.0]]))),  # async default: token TIS
])
@pytest.mark.parametrize("fuse", [True, False])
def test_each_mode_is_reached_from_the_config(keys, check, fuse):
    """Through the separate old-logprob pass and, where the correction is row-local, the fused one."""
    from legorl.train.batch import TrainBatch
    from legorl.train.trainer import StepTrainer

    cfg = load_config(None, [*keys, f"trainer.fuse_old_logprob_pass={str(fuse).lower()}"])
    algorithm = cfg.algorithm.model_copy(update={"rollout_is": cfg.effective_rollout_is()})  # as build_trainer
    actor = _Actor(torch.zeros(1, 5))
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]])
    batch = TrainBatch(torch.zeros(1, 5, dtype=torch.long), torch.ones(1, 5, dtype=torch.long), mask, BEHAV2,
                       torch.tensor([1.0]), ["g"])
    trainer = StepTrainer(algorithm.model_copy(update={"adv_estimator": "rloo", "n_resp_per_prompt": 2}),
                          cfg.trainer, actor)
    metrics = trainer.update(batch)
    assert check(actor.seen, metrics)
    row_local = not any(k.startswith(("algorithm.rollout_rs", "algorithm.ppo_anchor")) for k in keys)
    assert actor.seen["fused"] == (fuse and row_local)


BEHAV2 = torch.tensor([[0.0, -LN(0.25), -LN(3.0), 0.0, 0.0]])  # ratios 0.25, 3, 1 on positions 1..3
