"""`trainer.ppo_mini_batch_size`: a step's batch split into several optimizer steps of whole groups, each
against the proximal logprobs taken before the first; on from the config and the `legorl train` CLI."""

from __future__ import annotations

import json

from test_loop_cli import legorl, write_cfg
from test_trainer_memory import count_forwards, max_rel_diff, rows_batch, trainer_for

from legorl.train.memory import mini_batch_rows


def test_mini_batches_keep_groups_whole_in_the_batchs_order():
    groups = ["a", "a", "b", "c", "b", "c", "d"]
    assert mini_batch_rows(groups, None) == [list(range(7))]
    assert mini_batch_rows(groups, 2) == [[0, 1, 2, 4], [3, 5, 6]]
    assert mini_batch_rows(groups, 1) == [[0, 1], [2, 4], [3, 5], [6]]
    assert mini_batch_rows(groups, 4) == [list(range(7))]


def test_two_mini_batches_are_two_steps_against_the_logprobs_before_the_first(tiny_llama_dir):
    """The same weights as two hand-made optimizer steps, group g0 then g1, each a token-mean over its own
    rows, both against the logprobs of the weights before the update; not those of one whole-batch step."""
    batch = rows_batch()  # two mixed groups: g0 rows 0-2, g1 rows 3-5
    mini = trainer_for(tiny_llama_dir, "trainer.ppo_mini_batch_size=1")
    metrics = mini.update(batch)
    assert metrics["actor/optimizer_steps"] == 2
    assert "rollout_corr/abs_diff_mean" in metrics  # the fidelity gate still sees the whole batch

    by_hand = trainer_for(tiny_llama_dir, "trainer.fuse_old_logprob_pass=false")
    old = by_hand.actor.compute_logprobs(batch)
    adv = by_hand._advantages(batch, {})
    for rows in ([0, 1, 2], [3, 4, 5]):
        assert by_hand.actor.update(batch.select(rows), adv[rows], old[rows])["actor/optimizer_steps"] == 1
    assert max_rel_diff(mini.weights(), by_hand.weights()) < 1e-6

    whole = trainer_for(tiny_llama_dir)
    assert whole.update(batch)["actor/optimizer_steps"] == 1
    assert max_rel_diff(mini.weights(), whole.weights()) > 1e-3


def test_one_mini_batch_keeps_the_fused_pass(tiny_llama_dir):
    """A batch that fits one mini-batch is one optimizer step: its old logprobs still come from the gradient
    pass (as many forwards as without mini-batches); split in two it runs a separate no-grad pass first."""
    batch = rows_batch()
    trainers = [trainer_for(tiny_llama_dir, *o) for o in ([], ["trainer.ppo_mini_batch_size=2"],
                                                          ["trainer.ppo_mini_batch_size=1"])]
    counts = [count_forwards(t.actor.model) for t in trainers]
    for t in trainers:
        t.update(batch)
    plain, one, two = (c[0] for c in counts)
    assert one == plain and two > plain


def test_ppo_mini_batch_size_from_the_cli(tmp_path, tiny_run_config):
    """`legorl train ... trainer.ppo_mini_batch_size=1`: a step of 2 tasks x 2 trials takes 2 optimizer steps."""
    res = legorl("train", str(write_cfg(tiny_run_config, 1)), "trainer.ppo_mini_batch_size=1", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads((tmp_path / "runs" / "t" / "logs" / "t.jsonl").read_text().splitlines()[-1])
    assert row["actor/optimizer_steps"] == 2 and row["rollout_corr/abs_diff_mean"] <= 1e-5
    assert row["actor/grad_norm"] > 0
    res = legorl("train", str(write_cfg(tiny_run_config, 1)), "trainer.ppo_mini_batch_size=0", "--overwrite")
    assert res.returncode == 2 and "ppo_mini_batch_size" in res.stderr
