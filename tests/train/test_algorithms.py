"""Advantage estimators and policy losses against small hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from legorl.train.advantages import gae_advantages, grpo_advantages, rloo_advantages
from legorl.train.losses import aggregate, gspo_loss, kl_penalty, ppo_loss, rollout_is_weights

S = 1 / math.sqrt(2)  # (1 - 0.5) / std([1, 0]) with the unbiased std


def test_grpo_group_normalization_and_zero_std_groups():
    adv, stats = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), ["a", "a", "b", "b", "c", "c"])
    assert torch.allclose(adv, torch.tensor([S, -S, -S, S, 0.0, 0.0]), atol=1e-5)
    assert (stats.num_groups, stats.zero_std_groups) == (3, 1)
    adv, _ = grpo_advantages(torch.tensor([1.0, 0.0]), ["a", "a"], norm_by_std=False)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5]))


def test_rloo_leave_one_out_baseline():
    adv, stats = rloo_advantages(torch.tensor([1.0, 0.0, 0.0]), ["g"] * 3)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5]))
    assert stats.zero_std_groups == 0


def test_gae_runs_over_policy_tokens_only():
    mask = torch.tensor([[0, 1, 1, 0, 1]], dtype=torch.float32)
    values = torch.tensor([[9.0, 0.5, 0.6, 9.0, 0.7]])
    adv, ret = gae_advantages(torch.tensor([1.0]), values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[0.0, 0.5, 0.4, 0.0, 0.3]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]]), atol=1e-6)
    adv, _ = gae_advantages(torch.tensor([1.0]), values, mask, gamma=0.5, lam=1.0)
    # t2: 1 - .7 = .3; t1: .5*.7 - .6 + .5*.3 = -.1; t0: .5*.6 - .5 + .5*(-.1) = -.25
    assert torch.allclose(adv[0, [1, 2, 4]], torch.tensor([-0.25, -0.1, 0.3]), atol=1e-6)


def test_ppo_clip_and_dual_clip():
    m = torch.ones(1, 1)
    old = torch.zeros(1, 1)
    out = ppo_loss(torch.log(torch.tensor([[1.5]])), old, torch.ones(1, 1), m, 0.2, 0.28)
    assert out.loss.item() == pytest.approx(-1.28) and out.clipfrac == 1.0
    out = ppo_loss(torch.log(torch.tensor([[1.5]])), old, -torch.ones(1, 1), m, 0.2, 0.28)
    assert out.loss.item() == pytest.approx(1.5) and out.clipfrac == 0.0
    out = ppo_loss(torch.log(torch.tensor([[5.0]])), old, -torch.ones(1, 1), m, 0.2, 0.28, clip_c=3.0)
    assert out.loss.item() == pytest.approx(3.0)
    assert out.ppo_kl == pytest.approx(-math.log(5.0))


def test_loss_aggregation_modes():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(loss, mask, "token-mean").item() == pytest.approx(2.5)
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(5.0)


def test_gspo_sequence_ratio_clip_and_gradient():
    m = torch.ones(1, 2)
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.1, 0.3]], requires_grad=True)
    out = gspo_loss(logp, old, torch.ones(1, 2), m, 3e-4, 4e-4)
    assert out.loss.item() == pytest.approx(-(1 + 4e-4), rel=1e-6)  # exp(0.2) clipped to 1 + 4e-4
    out.loss.backward()
    assert torch.all(logp.grad == 0)
    logp = torch.tensor([[1e-4, 1e-4]], requires_grad=True)
    out = gspo_loss(logp, old, torch.ones(1, 2), m, 3e-4, 4e-4)
    s = math.exp(1e-4)
    assert out.loss.item() == pytest.approx(-s, rel=1e-6)
    out.loss.backward()
    assert torch.allclose(logp.grad, torch.full((1, 2), -s / 2), atol=1e-7)


def test_kl_and_importance_weights():
    lp = torch.tensor([[-1.0, -2.0]])
    assert torch.allclose(kl_penalty(lp, lp), torch.zeros(1, 2))
    assert kl_penalty(lp, lp - 1).min() > 0
    m = torch.ones(1, 2)
    w = rollout_is_weights(torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, -2.0]]), m, "token", 2.0)
    assert torch.allclose(w.weights, torch.tensor([[1.0, 2.0]]))  # exp(2) truncated at 2
    assert 0 < w.ess < 1
    w = rollout_is_weights(torch.tensor([[0.0, 0.0]]), torch.tensor([[-0.1, -0.2]]), m, "sequence", 10.0)
    assert torch.allclose(w.weights, torch.full((1, 2), math.exp(0.3)), atol=1e-6)
    assert rollout_is_weights(lp, lp, m, "none", 2.0) is None
