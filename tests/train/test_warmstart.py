"""The supervised warm start (`[warm_start]`): demonstrations replayed in real bubblewrap sandboxes through
the builtin scaffold, their token masks, and the fine-tune itself on the tiny model."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import shutil
from pathlib import Path

import pytest

from legorl.agents.builtin import NUDGE, bash_block
from legorl.config import RunConfig, load_config
from legorl.models.chat import encode_text, render_chat
from legorl.tasks.builtin_sets import load_builtin
from legorl.tasks.loader import load_tasks
from legorl.tasks.model import Task
from legorl.train.schedule import lr_lambda
from legorl.train.warmstart import (
    Transcript,
    encode,
    finetune,
    read_transcripts,
    replay_demonstrations,
)

ROOT = Path(__file__).resolve().parents[2]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def _task(task_id: str) -> Task:
    return next(t for t in load_builtin("shell-multistep") if t.id == task_id)


def _transcript() -> Transcript:
    """System, one few-shot pair, the task, two commands with outputs, submit."""
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "example task"},
            {"role": "assistant", "content": bash_block("ls")}, {"role": "user", "content": "the task"},
            {"role": "assistant", "content": bash_block("cat /app/a.txt")}, {"role": "user", "content": "Output:\nhi"},
            {"role": "assistant", "content": bash_block("touch /app/hi")}, {"role": "user", "content": NUDGE},
            {"role": "assistant", "content": bash_block("submit")}]
    return Transcript(msgs, train_from=4, source="t")


def test_encode_masks_the_task_replies_only(tokenizer):
    """The ids are the whole conversation's rendering; the mask covers exactly the task's assistant turns,
    each up to and including its end-of-turn token (what the engine would have sampled)."""
    t = _transcript()
    ex = encode(tokenizer, t)
    assert len(ex.input_ids) == len(ex.mask)
    assert tokenizer.decode(ex.input_ids) == render_chat(tokenizer, t.messages, add_generation_prompt=False)
    runs: list[list[int]] = []
    for i, m in enumerate(ex.mask):
        if m:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
    trained = [tokenizer.decode([ex.input_ids[i] for i in r]) for r in runs]
    replies = [m["content"] for m in t.messages[4:] if m["role"] == "assistant"]
    assert len(trained) == len(replies) == 3
    for text, reply in zip(trained, replies, strict=True):
        assert text.startswith(reply) and text[len(reply):] in {tokenizer.eos_token, "<|im_end|>", "</s>"}, text
    # the few-shot reply is context only
    assert "ls" not in "".join(trained)


def test_read_transcripts_says_which_line_is_wrong(tmp_path):
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(good) + "\n")
    assert [t.source for t in read_transcripts(path)] == ["t.jsonl:1", "t.jsonl:3"]
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"t.jsonl:2"):
        read_transcripts(path)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    with pytest.raises(ValueError, match="no assistant turn"):
        read_transcripts(path)
    with pytest.raises(ValueError, match="not found"):
        read_transcripts(tmp_path / "missing.jsonl")


@needs_bwrap
def test_replay_demonstrations_in_real_sandboxes(tmp_path):
    """Each demonstration runs in a fresh sandbox: the transcript holds the sandbox's real outputs (the hidden
    value the next command uses) and is kept only when the verifier scores it 1."""
    cfg = load_config(ROOT / "examples" / "agent.toml", ['agent.kwargs.examples=[["q", "```bash\\nls\\n```"]]'])
    good = _task("lookup-2")
    broken_dir = shutil.copytree(_task("cat-create-1").path, tmp_path / "cat-create-1")
    (broken_dir / "solution/demonstration.json").write_text(json.dumps({"commands": ["cat /app/name.txt"]}))
    broken = load_tasks(broken_dir)[0]
    lines: list[str] = []
    out = asyncio.run(replay_demonstrations(cfg, [good, broken], lines.append))
    assert [t.source for t in out] == ["lookup-2"]
    assert any("cat-create-1" in x and "dropped" in x for x in lines), lines
    msgs = out[0].messages
    commands = json.loads((good.solution_dir / "demonstration.json").read_text())["commands"]
    replies = [m["content"] for m in msgs[out[0].train_from:] if m["role"] == "assistant"]
    assert replies == [bash_block(c) for c in commands] + [bash_block("submit")]
    ticket = msgs[out[0].train_from + 2]["content"]  # the output of `cat /app/ticket.txt`
    reporter_id = commands[1].split()[1]
    assert ticket.startswith("Output:\nexit code: 0\n") and f"user {reporter_id}" in ticket
    # system, the few-shot pair (context), then the task
    assert [m["role"] for m in msgs[: out[0].train_from + 1]] == ["system", "user", "assistant", "user"]
    assert msgs[out[0].train_from]["content"] == good.instruction.strip()


def test_replay_needs_the_text_protocol():
    cfg = load_config(ROOT / "examples" / "agent.toml", ["agent.kwargs.tools=[\"bash\",\"submit\"]"])
    with pytest.raises(ValueError, match="tools = false"):
        asyncio.run(replay_demonstrations(cfg, [_task("lookup-2")]))
    cfg = RunConfig(agent={"name": "mini-swe-agent"})
    with pytest.raises(ValueError, match="JSONL"):
        asyncio.run(replay_demonstrations(cfg, [_task("lookup-2")]))


def test_finetune_learns_the_demonstrations(tiny_llama_dir, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    section = RunConfig().warm_start.model_copy(update={"epochs": 4, "lr": 1e-3, "batch_size": 2})
    examples = [encode(tokenizer, _transcript())] * 4
    lines: list[str] = []
    stats = finetune(tiny_llama_dir, examples, section, seed=0, out_dir=tmp_path / "m", on_line=lines.append)
    assert stats["nll_last"] < stats["nll_first"] * 0.8, stats
    assert len(lines) == 4 and all("nll" in x for x in lines)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")  # a plain HF model dir: engines load it
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(tiny_llama_dir).config.vocab_size
    assert encode_text(tokenizer, "x") == encode_text(type(tokenizer).from_pretrained(tmp_path / "m"), "x")


def test_lr_schedules_warm_up_then_decay_to_zero():
    """The one schedule both the trainer and the warm start step with (train/schedule.py)."""
    f = lr_lambda("constant", 0, 10)
    assert [f(i) for i in range(10)] == [1.0] * 10
    lin = lr_lambda("linear", 2, 10)
    assert [lin(i) for i in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    cos = lr_lambda("cosine", 0, 8)
    vals = [cos(i) for i in range(8)]
    assert vals[0] == 1.0 and 0.0 < vals[-1] < 0.05 and all(a > b for a, b in itertools.pairwise(vals))
    assert cos(3) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 8)))
    with pytest.raises(ValueError, match="lr_scheduler"):
        load_config(None, ["warm_start.lr_scheduler=step"])


def test_finetune_steps_with_the_schedule(tiny_llama_dir, tokenizer, tmp_path, monkeypatch):
    """The optimizer runs each step at the schedule's rate (AdamW.step is observed, not replaced)."""
    import torch

    seen: list[float] = []
    real_step = torch.optim.AdamW.step

    def observed(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", observed)
    cfg = load_config(None, ["warm_start.lr=1e-3", "warm_start.lr_scheduler=linear", "warm_start.warmup_steps=2",
                             "warm_start.epochs=2", "warm_start.batch_size=2"])
    examples = [encode(tokenizer, _transcript())] * 4  # 2 steps an epoch, 4 in all, the first two warm-up
    finetune(tiny_llama_dir, examples, cfg.warm_start, seed=0, out_dir=tmp_path / "m", on_line=lambda _: None)
    assert seen == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4])


def test_task_fraction_splits_demonstrations_from_rl_tasks():
    """warm_start.task_fraction < 1: the warm start's tasks and the RL steps' tasks are disjoint, cover the
    training split, take the fraction of every kind (stratify_by), and are the same on every call (resume)."""
    from collections import Counter

    from legorl.tasks.split import load_task_split
    from legorl.train.warmstart import split_for_warm_start

    cfg = load_config(ROOT / "examples" / "agent.toml", ["warm_start.task_fraction=0.5"])
    train, _ = load_task_split(cfg.tasks)
    demo, rl = split_for_warm_start(cfg, train)
    assert not {t.id for t in demo} & {t.id for t in rl}
    assert sorted(t.id for t in demo + rl) == sorted(t.id for t in train)
    kinds, demo_kinds = Counter(t.metadata["kind"] for t in train), Counter(t.metadata["kind"] for t in demo)
    assert all(abs(demo_kinds[k] - n / 2) <= 0.5 for k, n in kinds.items())
    assert [t.id for t in split_for_warm_start(cfg, train)[0]] == [t.id for t in demo]
    whole = load_config(ROOT / "examples" / "agent.toml", ["warm_start.task_fraction=1"])
    assert split_for_warm_start(whole, train) == (train, train)
    with pytest.raises(ValueError, match=r"needs warm_start\.data = 'task-demonstrations'"):
        load_config(None, ["warm_start.task_fraction=0.5", "warm_start.data=demos.jsonl"])
