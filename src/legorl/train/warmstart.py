"""A supervised warm start before RL (`[warm_start]`): a few epochs of SFT on demonstrations, so a model
that never solves a task (GRPO's groups all score 0: no signal) starts from one that sometimes does.

Demonstrations are chat transcripts. `data = "task-demonstrations"` makes them from the training tasks
themselves: each task's `solution/demonstration.json` (the commands an expert types, one per turn) is
replayed in a fresh sandbox through the run's builtin scaffold, so the prompts, few-shot examples and
command outputs are exactly what a live trial shows the model; a transcript is kept only when the
task's verifier then gives 1. Only the held-out split is never touched. Or `data` names a JSONL file of
`{"messages": [...]}` transcripts. The loss is the mean NLL of the assistant turns' tokens (the
task's own turns, not the few-shot examples), each cut after its end-of-turn token as the engine stops.

The result is a model directory under the run dir (`warm_start/model`), reused on resume; the trainer
and the engines start from it as from `model.path`. With `warm_start.cache` a fine-tune of the same inputs made
earlier on this machine is reused (train/warmstart_cache.py).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from legorl.config.run import RunConfig
from legorl.config.training import WarmStartSection
from legorl.models.chat import encode_text, load_tokenizer, render_chat, stop_token_ids
from legorl.rundir import RunDir
from legorl.tasks.model import Task
from legorl.train.heap import trim_heap
from legorl.train.logprobs import token_logprobs
from legorl.train.optim import adamw
from legorl.train.prefix import PrefixPlan, plan_prefixes
from legorl.train.schedule import lr_lambda
from legorl.train.warmstart_cache import cache_key, lookup, restore, store

DEMONSTRATION_FILE = "demonstration.json"
TASK_DEMONSTRATIONS = "task-demonstrations"


@dataclass
class Transcript:
    """One conversation; assistant turns from index `train_from` on are trained on."""

    messages: list[dict[str, Any]]
    train_from: int = 0
    source: str = ""


@dataclass
class Example:
    input_ids: list[int]
    mask: list[int]


def demonstration_commands(task: Task) -> list[str] | None:
    """The task's demonstration (one command per turn), or None when it ships none."""
    path = task.solution_dir / DEMONSTRATION_FILE
    if not path.is_file():
        return None
    commands = json.loads(path.read_text()).get("commands")
    if not isinstance(commands, list) or not commands or not all(isinstance(c, str) and c for c in commands):
        raise ValueError(f"{path}: expected {{\"commands\": [\"cmd\", ...]}} with at least one command")
    return commands


def split_for_warm_start(cfg: RunConfig, train_tasks: list[Task]) -> tuple[list[Task], list[Task]]:
    """(tasks whose demonstrations the warm start replays, tasks the RL steps sample). With
    `warm_start.task_fraction` < 1 the two are disjoint: a share of each `warm_start.stratify_by` value
    (at least one of each, among the tasks with a demonstration), or every task of a share of the
    `warm_start.demonstrate_by` values, else of each `tasks.stratify_by` value, else of all, by the split's
    stable hash, so a resumed run gets the same halves; otherwise both are every training task. Only
    `train_tasks` are drawn from: held-out tasks (and `tasks.holdout_by` values) never."""
    from legorl.tasks.index import split_tasks
    from legorl.tasks.split import share_per_value, stratified_split, whole_values

    fraction = cfg.warm_start.task_fraction
    if fraction >= 1 or cfg.warm_start.data != TASK_DEMONSTRATIONS:
        return train_tasks, train_tasks
    seed = cfg.tasks.split_seed
    by, per = cfg.warm_start.demonstrate_by, cfg.warm_start.stratify_by
    if by is not None or per is not None:
        split, field = (whole_values, "demonstrate_by") if by is not None else (share_per_value, "stratify_by")
        try:
            rl, demo = split(train_tasks, fraction, by or per, seed=seed,
                             eligible=lambda t: (t.solution_dir / DEMONSTRATION_FILE).is_file())
        except ValueError as exc:
            raise ValueError(f"warm_start.{field}: {exc} (of {len(train_tasks)} training tasks)") from None
    elif (key := cfg.tasks.stratify_by) is not None:
        rl, demo = stratified_split(train_tasks, fraction, key, seed=seed)
    else:
        rl, demo = split_tasks(train_tasks, fraction, seed=seed)
    if not rl:
        raise ValueError(f"warm_start.task_fraction={fraction} leaves none of the {len(train_tasks)} training "
                         "tasks to the RL steps: lower it")
    return demo, rl


def scaffold_problem(cfg: RunConfig) -> str | None:
    """Why the run's scaffold cannot render task demonstrations (None: it can)."""
    if cfg.agent.name != "builtin":
        return (f"warm_start.data = {TASK_DEMONSTRATIONS!r} renders with the builtin scaffold; agent.name is "
                f"{cfg.agent.name!r}: give a JSONL file of transcripts instead")
    from legorl.agents.builtin_tools import tool_schemas

    if tool_schemas(cfg.agent.kwargs.get("tools", True)):  # the scaffold's own rule: no schemas = text
        return (f"warm_start.data = {TASK_DEMONSTRATIONS!r} renders the text protocol: set agent.kwargs.tools = "
                "false, or give a JSONL file of transcripts")
    return None


async def replay_demonstrations(cfg: RunConfig, tasks: list[Task],
                                on_line: Callable[[str], None] = print) -> list[Transcript]:
    """Each task's demonstration through the run's builtin scaffold in a fresh sandbox; the transcripts of
    those its verifier scores 1 (the rest are reported and dropped)."""
    from legorl.agents.base import load_scaffold
    from legorl.agents.builtin import BuiltinScaffold
    from legorl.env import make_sandbox, verify
    from legorl.env.phases import enter_phase
    from legorl.workers.config import worker_config

    problem = scaffold_problem(cfg)
    if problem:
        raise ValueError(problem)
    scaffold = load_scaffold("builtin", **cfg.agent.kwargs)
    assert isinstance(scaffold, BuiltinScaffold)
    limits = worker_config(cfg).limits
    prefix = len(scaffold.first_messages("x")) - 1  # system + few-shot: context, never trained on
    todo = [(t, c) for t in tasks if (c := demonstration_commands(t)) is not None]
    if not todo:
        raise ValueError(f"warm_start.data = {TASK_DEMONSTRATIONS!r}: none of the {len(tasks)} training tasks "
                         f"has solution/{DEMONSTRATION_FILE}")
    sem = asyncio.Semaphore(max(1, min(cfg.rollout.concurrency, 4)))

    async def one(task: Task, commands: list[str]) -> Transcript | None:
        async with sem:
            sb = make_sandbox(task, cfg.sandbox.backend)
            await sb.start()
            try:
                await enter_phase(sb, "agent")
                messages = await scaffold.demonstrate(task.instruction, commands, sb, limits)
                res = await verify(sb, task, cfg.sandbox.verifier_timeout_sec)
            finally:
                await sb.stop()
        if res.reward != 1.0:
            on_line(f"warm start: {task.id}: the demonstration scored {res.reward} ({res.outcome}); dropped")
            return None
        return Transcript(messages, prefix, task.id)

    out = await asyncio.gather(*(one(t, c) for t, c in todo))
    return [t for t in out if t is not None]


def read_transcripts(path: Path) -> list[Transcript]:
    """A JSONL file, one `{"messages": [...]}` per line; every assistant turn is trained on."""
    if not path.is_file():
        raise ValueError(f"warm_start.data: {path} not found (a JSONL file of transcripts, or "
                         f"{TASK_DEMONSTRATIONS!r})")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: expected {{\"messages\": [...]}}: {exc}") from None
        if not any(m.get("role") == "assistant" for m in messages):
            raise ValueError(f"{path}:{n}: no assistant turn to train on")
        out.append(Transcript(messages, 0, f"{path.name}:{n}"))
    if not out:
        raise ValueError(f"{path}: no transcripts")
    return out


def encode(tokenizer, transcript: Transcript) -> Example:
    """Token ids and loss mask of a transcript, segment by segment as the proxy builds a session: each
    prompt rendered with the generation prompt, each assistant turn appended, masked up to and including
    its end-of-turn token (what the engine samples); everything else is context."""
    stops = set(stop_token_ids(tokenizer))
    msgs = transcript.messages
    ids: list[int] = []
    mask: list[int] = []
    done = ""  # the rendered text so far
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        prompt = render_chat(tokenizer, msgs[:i], add_generation_prompt=True)
        full = render_chat(tokenizer, msgs[: i + 1], add_generation_prompt=False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise ValueError(f"{transcript.source}: the chat template does not render turn {i} as an append")
        ids += encode_text(tokenizer, prompt[len(done):])
        mask += [0] * (len(ids) - len(mask))
        reply = encode_text(tokenizer, full[len(prompt):])
        cut = next((j + 1 for j, t in enumerate(reply) if t in stops), len(reply))
        trained = 1 if i >= transcript.train_from else 0
        ids += reply
        mask += [trained] * cut + [0] * (len(reply) - cut)
        done = full
    return Example(ids, mask)


def pad_examples(rows: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, loss mask) of `rows` right-padded to the longest (pads: mask 0)."""
    width = max(len(e.input_ids) for e in rows)
    pad = [width - len(e.input_ids) for e in rows]
    ids = torch.tensor([e.input_ids + [0] * p for e, p in zip(rows, pad, strict=True)])
    att = torch.tensor([[1] * len(e.input_ids) + [0] * p for e, p in zip(rows, pad, strict=True)])
    mask = torch.tensor([e.mask + [0] * p for e, p in zip(rows, pad, strict=True)], dtype=torch.float32)
    return ids, att, mask


def shared_prefix(ids: torch.Tensor, att: torch.Tensor) -> PrefixPlan | None:
    """The plan that forwards the tokens every row of a warm-start forward opens with (the system prompt: 36 of
    ~250 tokens in the look-act demonstrations) once for all rows (train/prefix.py, as the RL update does); None
    for one row or no common prefix. An epoch over real demonstrations ran 1.09x faster with it
    (`bench/warm_start.py ... --variants no-shared-prefix grouped`, 2026-12-07, docs/agent-lookact.md)."""
    if ids.shape[0] < 2:
        return None
    plan = plan_prefixes(ids, att, ["demonstrations"] * ids.shape[0])
    return plan if len(plan.levels) > 1 else None


def finetune(model_dir: Path, examples: list[Example], section: WarmStartSection, seed: int, out_dir: Path,
             on_line: Callable[[str], None] = print, checkpointing: bool = False) -> dict[str, float]:
    """`section.epochs` passes of AdamW over `examples` (shuffled, `batch_size` per step, token-mean NLL over
    the step's batch); saves the model and tokenizer to `out_dir`. Returns the first and last epoch's mean NLL.

    The batch runs as a few forward/backwards (`warm_start_forwards`: rows of similar length together, each
    forward's activations under `WARM_START_ROW_ACT_BYTES`; 4 padded rows held ~2.4 GB at 135M), each gradient
    accumulated with the batch's token count as the divisor: the step's loss and gradient are the padded
    batch's (to fp32 rounding). `checkpointing` (`model.gradient_checkpointing`) recomputes each layer's in
    backward for a row whose activations would be large alone (`warm_start_recomputes`)."""
    from transformers import AutoModelForCausalLM

    from legorl.ops.preflight_memory import ModelDims, warm_start_forwards, warm_start_recomputes
    from legorl.train.memory import enable_activation_checkpointing, set_activation_checkpointing

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train(False)  # no dropout, as in the RL update
    if checkpointing:
        enable_activation_checkpointing(model)
    dims = ModelDims.from_config(model.config.to_dict())
    opt = adamw([p for p in model.parameters() if p.requires_grad], lr=section.lr)
    steps_per_epoch = -(-len(examples) // section.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(section.lr_scheduler, section.warmup_steps, steps_per_epoch * section.epochs))
    rng = random.Random(seed)
    nll: list[float] = []
    for epoch in range(1, section.epochs + 1):
        order = list(range(len(examples)))
        rng.shuffle(order)
        total, tokens, t0 = 0.0, 0, time.perf_counter()
        for s in range(0, len(order), section.batch_size):
            batch = [examples[i] for i in order[s: s + section.batch_size]]
            n = float(sum(sum(e.mask) for e in batch))
            loss_sum = 0.0
            for rows in warm_start_forwards(dims, [len(e.input_ids) for e in batch]):
                ids, att, mask = pad_examples([batch[i] for i in rows])
                if checkpointing:  # only a long row (alone in its forward) is recomputed
                    set_activation_checkpointing(model, warm_start_recomputes(dims, ids.numel(), True))
                logp, _ = token_logprobs(model, ids, att, mask, prefix=shared_prefix(ids, att))
                loss = -(logp * mask).sum() / max(n, 1.0)
                loss.backward()
                loss_sum += float(loss.detach())
                del logp, loss
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total += loss_sum * n
            tokens += int(n)
        nll.append(total / max(tokens, 1))
        on_line(f"warm start: epoch {epoch}/{section.epochs}: nll {nll[-1]:.4f} over {tokens} tokens "
                f"({time.perf_counter() - t0:.1f} s)")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    load_tokenizer(model_dir).save_pretrained(out_dir)
    return {"nll_first": nll[0], "nll_last": nll[-1]}


async def warm_start(cfg: RunConfig, run_dir: RunDir, model_dir: Path, train_tasks: list[Task],
                     on_line: Callable[[str], None] = print) -> Path:
    """The warm-started model directory: made once per run (`<run>/warm_start/model`), reused after."""
    section = cfg.warm_start
    t0 = time.perf_counter()
    root = run_dir.warm_start
    done = root / "done.json"
    if done.is_file():
        on_line(f"warm start: reusing {root / 'model'}")
        return root / "model"
    if section.data == TASK_DEMONSTRATIONS:
        transcripts = await replay_demonstrations(cfg, train_tasks, on_line)
    else:
        transcripts = read_transcripts(Path(section.data).expanduser())
    if not transcripts:
        raise ValueError("warm start: no demonstration scored 1; nothing to train on")
    root.mkdir(parents=True, exist_ok=True)
    with (root / "transcripts.jsonl").open("w") as f:
        for t in transcripts:
            f.write(json.dumps({"source": t.source, "train_from": t.train_from, "messages": t.messages}) + "\n")
    tok = load_tokenizer(model_dir)
    examples = [encode(tok, t) for t in transcripts]
    on_line(f"warm start: {len(examples)} transcripts, {sum(map(sum, (e.mask for e in examples)))} trained "
            f"tokens, {section.epochs} epochs")
    checkpointing = bool(cfg.model.gradient_checkpointing)
    seed = cfg.run.seed if section.seed is None else section.seed
    key = cache_key(model_dir, examples, section, seed, checkpointing) if section.cache else None
    hit = lookup(key) if key else None
    stats: dict[str, float] = {}
    if hit is not None:
        entry, before = hit
        try:
            restore(entry, root / "model")
            stats = {"nll_first": before["nll_first"], "nll_last": before["nll_last"], "cached": 1.0}
            on_line(f"warm start: the same model, demonstrations and settings were fine-tuned before on this "
                    f"machine: reusing {entry} (warm_start.cache)")
        except (OSError, KeyError, ValueError) as exc:  # evicted or damaged meanwhile: fine-tune instead
            on_line(f"warm start: the cached {entry} could not be used ({exc}); fine-tuning")
    if not stats:
        stats = await asyncio.to_thread(finetune, model_dir, examples, section, seed, root / "model",
                                        on_line, checkpointing)
        trim_heap()  # the warm start's model, grads and AdamW state are garbage now: give their pages back
        if key:
            store(key, root / "model", stats, on_line)
        stats["cached"] = 0.0
    stats["time_s"] = time.perf_counter() - t0
    done.write_text(json.dumps({"transcripts": len(examples), **stats}, indent=1) + "\n")
    return root / "model"


def warm_start_metrics(run_dir: RunDir) -> dict[str, float]:
    """The warm start's figures for the step-0 log line (`warm_start/*`); empty when there was none."""
    done = run_dir.warm_start / "done.json"
    if not done.is_file():
        return {}
    return {f"warm_start/{k}": float(v) for k, v in json.loads(done.read_text()).items()}
