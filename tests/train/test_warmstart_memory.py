"""The warm start's fine-tune keeps one transcript's activations at a time: its step (per-row backward,
gradients accumulated over the batch's token count) is the padded batch's step to fp32 rounding."""

from __future__ import annotations

import random

import torch

from legorl.config import RunConfig
from legorl.train.logprobs import token_logprobs
from legorl.train.warmstart import Example, finetune


def _examples(vocab: int) -> list[Example]:
    rng = random.Random(0)
    out = []
    for n in (23, 9, 17, 31):  # different lengths: the padded batch pads three of them
        ids = [rng.randrange(3, vocab) for _ in range(n)]
        mask = [0] * (n // 2) + [1] * (n - n // 2)
        out.append(Example(ids, mask))
    return out


def _padded_reference(model_dir, examples, section, seed):
    """The warm start's step as it was: one padded forward over the whole batch."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train(False)
    opt = torch.optim.AdamW(list(model.parameters()), lr=section.lr, weight_decay=0.0)
    rng = random.Random(seed)
    for _ in range(section.epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for s in range(0, len(order), section.batch_size):
            batch = [examples[i] for i in order[s: s + section.batch_size]]
            width = max(len(e.input_ids) for e in batch)
            ids = torch.tensor([e.input_ids + [0] * (width - len(e.input_ids)) for e in batch])
            att = torch.tensor([[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in batch])
            mask = torch.tensor([e.mask + [0] * (width - len(e.mask)) for e in batch], dtype=torch.float32)
            logp, _ = token_logprobs(model, ids, att, mask)
            loss = -(logp * mask).sum() / max(float(mask.sum()), 1.0)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return model


def test_per_row_accumulation_matches_the_padded_batch(tiny_llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    section = RunConfig().warm_start.model_copy(update={"epochs": 2, "lr": 1e-3, "batch_size": 4})
    vocab = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).config.vocab_size
    examples = _examples(vocab)
    ref = _padded_reference(tiny_llama_dir, examples, section, seed=0)
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "m", on_line=lambda _: None)
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32)
    ref_state = ref.state_dict()
    worst = max(float((v - ref_state[k]).abs().max()) for k, v in got.state_dict().items())
    assert worst < 1e-5, worst  # two AdamW steps at lr 1e-3 move weights ~2e-3: rounding only
