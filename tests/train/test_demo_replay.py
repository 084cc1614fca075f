"""`warm_start.rl_nll_coef`: the warm start's demonstrations replayed in every RL optimizer step (PPO-ptx). The
rows each step takes, the NLL the actor adds (checked against an independent forward of the tiny real model),
and the config's refusals. `legorl train` with it on: test_warmstart_cache.py."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM

from legorl.config import AlgorithmSection, RunConfig, TrainerSection
from legorl.train.actor import Actor
from legorl.train.batch import TrainBatch
from legorl.train.demo_replay import DemoReplay, demo_replay, transcripts_path
from legorl.train.logprobs import token_logprobs
from legorl.train.warmstart import Example, Transcript, encode


def _transcripts(n: int) -> list[Transcript]:
    return [Transcript([{"role": "system", "content": "sys"}, {"role": "user", "content": f"Read /app/a{i}.txt."},
                        {"role": "assistant", "content": f"```bash\ncat /app/a{i}.txt\n```"}], source=f"t{i}")
            for i in range(n)]


def test_rows_cycle_through_every_demonstration_once_a_pass():
    examples = [Example([i, i], [0, 1]) for i in range(5)]
    replay = DemoReplay(examples, coef=1.0, rows_per_step=2, seed=3)
    firsts = [e.input_ids[0] for k in range(5) for e in replay.rows(k)]  # two passes
    assert sorted(firsts[:5]) == sorted(firsts[5:]) == list(range(5))
    assert firsts[:5] != firsts[5:]  # a new shuffle each pass
    assert [e.input_ids for e in replay.rows(3)] == [e.input_ids for e in DemoReplay(examples, 1.0, 2, 3).rows(3)]
    assert len(DemoReplay(examples, 1.0, 9, 0).rows(0)) == 5  # more rows asked than there are: each once


def _nll(model, batch: TrainBatch) -> float:
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask, 1.0)
    return float(-(logp * batch.mask).sum() / batch.mask.sum())


def test_the_update_adds_the_demonstrations_nll(tiny_llama_dir, tokenizer):
    """A zero-advantage RL batch: the policy term has no gradient, so what moves the weights is the replayed NLL;
    the logged `actor/demo_nll` is the demonstrations' NLL before the step, and it falls."""
    examples = [encode(tokenizer, t) for t in _transcripts(4)]
    replay = DemoReplay(examples, coef=1.0, rows_per_step=3, seed=0)
    demos = replay.batch(0)
    rl = replay.batch(1)  # any rows will do for the RL batch: its advantages are 0
    rl.group_ids = ["g", "g", "g"]

    def actor(with_demos: bool) -> Actor:
        model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
        return Actor(model, TrainerSection(lr=1e-2, micro_batch_size=2, total_steps=2, max_tokens_per_micro_batch=64),
                     AlgorithmSection(), temperature=0.7, demos=replay if with_demos else None)

    plain, anchored = actor(False), actor(True)
    before = _nll(anchored.model, demos)
    zero = torch.zeros_like(rl.mask)
    m = anchored.update(rl, zero, anchored.compute_logprobs(rl))
    assert m["actor/demo_nll"] == pytest.approx(before, rel=1e-4)
    assert _nll(anchored.model, demos) < before - 0.05
    assert "actor/demo_nll" not in plain.update(rl, zero, plain.compute_logprobs(rl))
    assert _nll(plain.model, demos) == pytest.approx(before, rel=1e-6)  # no gradient, no move
    # the next update takes the next rows
    assert [e.input_ids for e in replay.rows(1)] != [e.input_ids for e in replay.rows(0)]


def test_demo_replay_reads_the_runs_transcripts(tiny_llama_dir, tokenizer, tmp_path):
    cfg = RunConfig(run={"output_dir": str(tmp_path), "name": "r"}, model={"path": str(tiny_llama_dir)},
                    warm_start={"enabled": True, "rl_nll_coef": 0.5, "rl_nll_batch": 2})
    with pytest.raises(FileNotFoundError, match=r"transcripts\.jsonl is missing"):
        demo_replay(cfg, tiny_llama_dir)
    path = transcripts_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"messages": t.messages, "train_from": 0, "source": t.source}) + "\n"
                            for t in _transcripts(3)))
    replay = demo_replay(cfg, tiny_llama_dir)
    assert replay is not None and (replay.coef, replay.rows_per_step, len(replay.examples)) == (0.5, 2, 3)
    assert replay.examples[0].input_ids == encode(tokenizer, _transcripts(1)[0]).input_ids
    assert demo_replay(cfg.model_copy(update={"warm_start": cfg.warm_start.model_copy(
        update={"rl_nll_coef": 0.0})}), tiny_llama_dir) is None


def test_rl_nll_coef_needs_the_warm_start():
    with pytest.raises(ValidationError, match=r"rl_nll_coef > 0 .* needs warm_start\.enabled = true"):
        RunConfig(warm_start={"rl_nll_coef": 0.1})
