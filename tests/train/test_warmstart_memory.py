"""The warm start's fine-tune keeps a bounded forward's activations at a time: its step (a few rows per backward,
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


def test_a_prefix_every_row_shares_is_forwarded_once_and_changes_nothing(tiny_llama_dir, tmp_path, monkeypatch):
    """Demonstrations open with the same system prompt: a forward of several rows computes it once
    (`shared_prefix`, train/prefix.py) and the fine-tune still makes the padded batch's model."""
    from transformers import AutoModelForCausalLM

    import legorl.train.warmstart as ws

    section = RunConfig().warm_start.model_copy(update={"epochs": 2, "lr": 1e-3, "batch_size": 4})
    vocab = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).config.vocab_size
    system = [random.Random(1).randrange(3, vocab) for _ in range(7)]
    examples = [Example(system + e.input_ids, [0] * 7 + e.mask) for e in _examples(vocab)]
    roots: list[int] = []
    real = ws.token_logprobs

    def observed(model, ids, att, mask, **k):
        plan = k.get("prefix")
        roots.append(int(plan.levels[0].ids.shape[1]) if plan is not None else 0)
        return real(model, ids, att, mask, **k)

    monkeypatch.setattr(ws, "token_logprobs", observed)
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "m", on_line=lambda _: None)
    assert roots == [7, 7]  # one forward of the 4 rows per epoch, the 7 shared tokens its first level
    ref = _padded_reference(tiny_llama_dir, examples, section, seed=0).state_dict()
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).state_dict()
    assert max(float((v - ref[k]).abs().max()) for k, v in got.items()) < 1e-5
    one = [Example([*system, 5, 6], [0] * 7 + [1, 1])]
    assert ws.shared_prefix(*ws.pad_examples(one)[:2]) is None  # one row: nothing to share
    assert ws.shared_prefix(*ws.pad_examples(_examples(vocab))[:2]) is None  # no common first token


def test_checkpointing_recomputes_only_the_long_rows_and_changes_nothing(tiny_llama_dir, tmp_path, monkeypatch):
    """With `model.gradient_checkpointing` the warm start recomputes a row only when its activations would pass
    `WARM_START_ROW_ACT_BYTES` (here set between the 23- and 31-token rows); the model is the same either way."""
    from transformers import AutoModelForCausalLM

    import legorl.ops.preflight_memory as pm
    import legorl.train.memory as memory

    section = RunConfig().warm_start.model_copy(update={"epochs": 2, "lr": 1e-3, "batch_size": 2})
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    dims = pm.ModelDims.from_config(model.config.to_dict())
    monkeypatch.setattr(pm, "WARM_START_ROW_ACT_BYTES", pm.activation_bytes(dims, 27, False))
    examples = _examples(model.config.vocab_size)
    decisions: list[bool] = []
    real = memory.set_activation_checkpointing
    monkeypatch.setattr(memory, "set_activation_checkpointing", lambda m, on: (decisions.append(on), real(m, on)))
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "plain", on_line=lambda _: None)
    assert decisions == []  # no checkpointing asked: no switching
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "ckpt", on_line=lambda _: None,
             checkpointing=True)
    assert sorted(decisions) == [False] * 6 + [True] * 2  # 2 epochs x (23, 9, 17 tokens: no; 31: yes)
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / d, dtype=torch.float32).state_dict()
            for d in ("plain", "ckpt"))
    assert max(float((v - b[k]).abs().max()) for k, v in a.items()) < 1e-6


def test_forwards_group_rows_of_similar_length_under_the_activation_limit():
    import legorl.ops.preflight_memory as pm

    dims = pm.ModelDims(params=135_000_000, layers=30, hidden=576, intermediate=1536, vocab=49152, kv_heads=3,
                        head_dim=64)
    per_token = pm.activation_bytes(dims, 1, False)  # ~1.5 MB: ~667 tokens fill the 1 GB limit
    assert pm.warm_start_forwards(dims, [230, 210, 350, 200]) == [[3, 1], [0], [2]]  # 2 x 210 fits, 3 x 230 not
    assert pm.warm_start_forwards(dims, [100] * 7) == [[0, 1, 2, 3, 4, 5], [6]]  # 6 x 100 fits, 7 x 100 not
    assert pm.warm_start_forwards(dims, [2000, 50]) == [[1], [0]]  # a row over the limit goes alone
    assert 6 * 100 * per_token <= pm.WARM_START_ROW_ACT_BYTES < 700 * per_token
    assert pm.warm_start_forwards(dims, []) == []


def test_grouped_forwards_make_the_per_row_model(tiny_llama_dir, tmp_path, monkeypatch):
    """Rows sharing a forward (padded) train the model the per-row forwards do, to fp32 rounding."""
    from transformers import AutoModelForCausalLM

    import legorl.ops.preflight_memory as pm

    section = RunConfig().warm_start.model_copy(update={"epochs": 2, "lr": 1e-3, "batch_size": 4})
    examples = _examples(AutoModelForCausalLM.from_pretrained(tiny_llama_dir).config.vocab_size)
    shapes: list[tuple[int, int]] = []
    real = token_logprobs

    def observed(model, ids, *a, **k):
        shapes.append(tuple(ids.shape))
        return real(model, ids, *a, **k)

    monkeypatch.setattr("legorl.train.warmstart.token_logprobs", observed)
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "grouped", on_line=lambda _: None)
    assert shapes == [(4, 31)] * 2  # the whole batch in one forward, padded to its longest row
    shapes.clear()
    monkeypatch.setattr(pm, "WARM_START_ROW_ACT_BYTES", 0.0)  # nothing fits: one row per forward
    finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "rows", on_line=lambda _: None)
    assert sorted(shapes) == sorted([(1, n) for n in (23, 9, 17, 31)] * 2)
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / d, dtype=torch.float32).state_dict()
            for d in ("grouped", "rows"))
    assert max(float((v - b[k]).abs().max()) for k, v in a.items()) < 1e-5


def test_suspended_checkpointing_runs_each_layer_once(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from legorl.train.memory import enable_activation_checkpointing, set_activation_checkpointing

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    enable_activation_checkpointing(model)
    calls = [0]
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    ids = torch.tensor([[5, 6, 7, 8]])
    for on, expected in ((True, 2), (False, 1)):
        calls[0] = 0
        set_activation_checkpointing(model, on)
        model(input_ids=ids).logits.sum().backward()
        assert calls[0] == expected, (on, calls[0])
