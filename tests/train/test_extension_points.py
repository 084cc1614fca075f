"""A researcher's own advantage estimator and policy loss, named `module:attr` in the config, drive a
real update on the tiny model through the same builder `legorl train` uses."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from _rollout_helpers import trial

from legorl.config import load_config
from legorl.train.build import build_trainer
from legorl.train.steps import learn

PLUGIN = textwrap.dedent('''
    import torch
    from legorl.train.advantages import GroupStats
    from legorl.train.losses import ppo_policy_loss

    CALLS = []

    def sign_estimator(rewards, group_ids, algorithm):
        CALLS.append("estimator")
        return torch.sign(rewards - 0.5), GroupStats(len(set(group_ids)), 0)

    def scaled_ppo(logp, old_logp, adv, mask, algorithm, weights=None, agg="token-mean"):
        CALLS.append("loss")
        return ppo_policy_loss(logp, old_logp, adv * 2.0, mask, algorithm, weights, agg)
''')


def test_custom_estimator_and_loss_from_the_config(tiny_llama_dir, tmp_path, monkeypatch):
    (tmp_path / "my_rl_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "algorithm.adv_estimator=my_rl_plugin:sign_estimator",
                             "algorithm.policy_loss_mode=my_rl_plugin:scaled_ppo", "trainer.lr=1e-3"])
    trainer = build_trainer(cfg, tiny_llama_dir)
    g = torch.Generator().manual_seed(0)
    trials = []
    for i in range(4):
        toks = torch.randint(0, 500, (24,), generator=g).tolist()
        trials.append(trial(f"r{i}", "t", toks, [0] * 8 + [1] * 16, [-6.0] * 24, reward=float(i % 2), group_id="g"))
    before = {k: v.clone() for k, v in trainer.actor.model.state_dict().items()}
    m = learn(trainer, trials)
    plugin = sys.modules["my_rl_plugin"]
    assert plugin.CALLS[0] == "estimator" and "loss" in plugin.CALLS
    assert m["actor/grad_norm"] > 0
    assert any(not torch.equal(v, before[k]) for k, v in trainer.actor.model.state_dict().items())


def test_unknown_estimator_is_one_clear_error(tiny_llama_dir):
    with pytest.raises(Exception, match="adv_estimator='nope'"):
        load_config(None, ["algorithm.adv_estimator=nope"])
    cfg = load_config(None, [f"model.path={tiny_llama_dir}", "algorithm.adv_estimator=no_such_mod:fn"])
    with pytest.raises(ValueError, match="cannot load advantage estimator 'no_such_mod:fn'"):
        build_trainer(cfg, tiny_llama_dir)
