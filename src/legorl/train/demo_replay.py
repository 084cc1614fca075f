"""The warm start's demonstrations kept in the RL updates (`warm_start.rl_nll_coef`): each optimizer step adds
their NLL, times the coefficient, to the policy loss (InstructGPT's PPO-ptx, with the demonstrations as the
anchor data). RL practises some kinds and moves weights every kind shares; a look the demonstrations taught for
kinds RL never samples can drift to a generic one (docs/agent-lookact.md), and the replayed NLL pulls it back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from legorl.config.run import RunConfig
from legorl.models.chat import load_tokenizer
from legorl.rundir import RunDir
from legorl.train.batch import TrainBatch
from legorl.train.warmstart import Example, encode, pad_examples, read_transcripts

GROUP = "demonstrations"  # one group: their common system prompt is forwarded once (trainer.share_prefix)


@dataclass
class DemoReplay:
    """The encoded demonstrations and how many each optimizer step trains on."""

    examples: list[Example]
    coef: float
    rows_per_step: int
    seed: int = 0

    def rows(self, k: int) -> list[Example]:
        """The `k`-th optimizer step's demonstrations: consecutive slices of a seeded shuffle, a new shuffle for
        each pass, so every demonstration comes back once a pass and a resumed run (k from the step count)
        takes the same ones."""
        n = len(self.examples)
        per = min(self.rows_per_step, n)
        orders: dict[int, list[int]] = {}  # a step's rows span at most two passes
        out = []
        for j in range(k * per, (k + 1) * per):
            cycle, pos = divmod(j, n)
            if cycle not in orders:
                orders[cycle] = list(range(n))
                random.Random(f"{self.seed}:{cycle}").shuffle(orders[cycle])
            out.append(self.examples[orders[cycle][pos]])
        return out

    def batch(self, k: int) -> TrainBatch:
        """The `k`-th step's demonstrations as a right-padded batch (mask: the trained assistant tokens)."""
        ids, att, mask = pad_examples(self.rows(k))
        mask[:, 0] = 0  # as `collate`: position 0 has no context
        return TrainBatch(ids, att, mask, torch.zeros_like(mask), torch.zeros(ids.shape[0]), [GROUP] * ids.shape[0])


def transcripts_path(cfg: RunConfig) -> Path:
    """Where the run's warm start wrote the transcripts it trained on."""
    return RunDir.of(cfg.run.output_dir, cfg.run.name).warm_start / "transcripts.jsonl"


def demo_replay(cfg: RunConfig, model_dir: Path) -> DemoReplay | None:
    """The run's replay under `warm_start.rl_nll_coef` > 0 (None when off), encoded with `model_dir`'s tokenizer."""
    ws = cfg.warm_start
    if ws.rl_nll_coef <= 0:
        return None
    path = transcripts_path(cfg)
    if not path.is_file():
        raise FileNotFoundError(f"warm_start.rl_nll_coef={ws.rl_nll_coef} replays the warm start's demonstrations, "
                                f"but {path} is missing: the warm start writes it (warm_start.enabled = true)")
    tok = load_tokenizer(model_dir)
    examples = [encode(tok, t) for t in read_transcripts(path)]
    return DemoReplay(examples, ws.rl_nll_coef, ws.rl_nll_batch, seed=cfg.run.seed)
