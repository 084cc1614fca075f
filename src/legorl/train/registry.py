"""Open extension points of the trainer: advantage estimators and policy losses by name or `module:attr`.

A researcher adds an estimator without forking: `algorithm.adv_estimator = "mypkg.adv:my_estimator"`
with the signature of `legorl.train.advantages.grpo_estimator`
(`(rewards [B], group_ids, algorithm) -> (advantages [B], GroupStats)`), or a loss with
`algorithm.policy_loss_mode = "mypkg.loss:my_loss"` and the signature of
`legorl.train.losses.ppo_policy_loss` (returns a `PolicyLossOut`). `gae` is built in (it needs the critic).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from legorl.plugins import load_object

ADV_ESTIMATORS: dict[str, str] = {
    "grpo": "legorl.train.advantages:grpo_estimator",
    "rloo": "legorl.train.advantages:rloo_estimator",
}
POLICY_LOSSES: dict[str, str] = {
    "ppo": "legorl.train.losses:ppo_policy_loss",
    "gspo": "legorl.train.losses:gspo_policy_loss",
}


def advantage_estimator(name: str) -> Callable[..., Any]:
    """The outcome-level estimator behind `algorithm.adv_estimator` (not `gae`: that one needs a critic)."""
    return load_object(name, ADV_ESTIMATORS, "advantage estimator")


def policy_loss(name: str) -> Callable[..., Any]:
    """The policy loss behind `algorithm.policy_loss_mode`."""
    return load_object(name, POLICY_LOSSES, "policy loss")
