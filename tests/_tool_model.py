"""A tiny model that calls a tool: tiny-llama fine-tuned (seeded, on CPU, ~1.5-2 min) to answer any ChatML
conversation with one fixed reply, e.g. a Hermes `<tool_call>` of a harness's shell tool.

A random tiny model never writes a valid tool call, so a training run through a real agent CLI would
never execute a command and never show a tool output in its record. This model does, by its own
forward and sampling (no scripted engine): the prefixes it is tuned on are random token runs and
pseudo-sentences of 30-1700 tokens, tool lists in the proxy's rendering whose own schema names the reply's
arguments, and decoy calls of other names and keys, sometimes with an earlier call and a tool response, so it
holds for a harness's real ~1.3k-token prompt and for the turn after a command's output.

The reply's tokens repeat (`_`, ` "`, `":`, `tool`, `>`), so the model must read the reply's last few tokens
and not copy what followed the same tokens in the prompt. Tuned on slices of this repo's docs with a one-key
schema (the recipe before 2026-12-07), the model changed with every docs edit and so did the test: on Codex's
ten prompts of tests/train/test_agent_codex.py (turn 1 and turn 2, captured from a run) p(the exact reply, T 0.5)
was >= 0.9998 on all ten for seed 1, but 0.002-1.0 for seed 0 and 0.0-0.81 for seed 2 (docs of 2026-12-07).
With the pseudo-sentences, the schema and the decoys it was >= 0.9998 on all ten for seeds 0, 1 and 2 and for
seed 0 with torch limited to AVX2 (other float rounding): 2026-12-07, 2-core Intel Xeon (Ice Lake), quiet. The
embedding (tied to the head, 3.1M of the 3.3M parameters) stays frozen and Adam is fused: 96-105 s against
135-149 s for the same 1,200 steps.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from pathlib import Path

VERSION = 4  # part of the cache key: bump when the recipe changes


def tool_calling_model(base: Path, reply: str, steps: int = 1200, seed: int = 0, max_len: int = 1900,
                       parser_name: str = "hermes") -> Path:
    """The tuned model's directory, built once per machine (next to the prepared models, as tiny-llama is)."""
    from legorl.models.store import legorl_home

    out_root = legorl_home() / "models" / "tests"
    out_root.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{base}:{reply}:{steps}:{seed}:{max_len}:{parser_name}:{VERSION}".encode()).hexdigest()[:12]
    out = out_root / f"tool-model-{key}"
    if (out / "config.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM

    from legorl.models.chat import encode_text, load_tokenizer
    from legorl.proxy.messages import ToolSpec
    from legorl.proxy.parsers import get_parser

    tok = load_tokenizer(base)
    enc = lambda s: encode_text(tok, s)  # noqa: E731
    target = [*enc(reply), tok.eos_token_id]
    system, user, gen = enc("<|im_start|>system\n"), enc("<|im_end|>\n<|im_start|>user\n"), \
        enc("<|im_end|>\n<|im_start|>assistant\n")
    call = json.loads(reply[reply.index("{"):reply.rindex("}") + 1])
    tool_name, arg_keys = call["name"], list(call["arguments"])
    corpus = enc(pseudo_text(tok, random.Random(1234)))
    rng = random.Random(seed)
    torch.set_num_threads(1)  # tiny ops: more threads only spin against each other on a loaded machine
    parser = get_parser(parser_name)
    torch.manual_seed(seed)

    def word() -> str:
        return tok.decode(corpus[rng.randrange(len(corpus))]).strip() or "x"

    def decoy() -> list[int]:  # a call of another name or keys: what follows its tokens is not the reply's
        keys = [rng.choice([*arg_keys, word(), "name", "arguments"]) for _ in range(rng.randint(1, 3))]
        other = {"name": rng.choice([tool_name, word()]),
                 "arguments": {k: " ".join(word() for _ in range(rng.randint(1, 4))) for k in keys}}
        text = json.dumps(other) if rng.random() < 0.5 else f"<tool_call>\n{json.dumps(other)}\n</tool_call>"
        return enc(rng.choice(["", " ", "\n", "\n\n"]) + text + rng.choice(["", " ", "\n"]))

    def run(n: int) -> list[int]:
        if rng.random() < 0.3:  # pseudo-sentences with decoy calls among them
            out: list[int] = []
            while len(out) < n:
                if rng.random() < 0.3:
                    out += decoy()
                else:
                    i = rng.randrange(len(corpus) - 40)
                    out += corpus[i:i + 40]
            return out[:n]
        if rng.random() < 0.5:
            return [rng.randrange(200, 20000) for _ in range(n)]
        start = rng.randrange(0, len(corpus) - n)
        return corpus[start:start + n]

    def schema(name: str) -> dict:  # the tool's own schema names the reply's arguments, as a harness's does
        keys = (arg_keys if name == tool_name else []) + [word() for _ in range(rng.randint(name != tool_name, 3))]
        return {"type": "object", "properties": {k: {"type": "string", "description": tok.decode(run(rng.randint(3, 20)))}
                                                 for k in keys}}

    def tools() -> list[int]:  # the proxy's tool instructions, as it renders them for a harness's tool list
        specs = [ToolSpec(name, tok.decode(run(40)), schema(name))
                 for name in (tool_name, *(f"t{rng.randrange(1000)}" for _ in range(rng.randint(0, 3))))]
        rng.shuffle(specs)
        return enc("\n\n" + parser.system_prompt(specs))

    def prefix() -> list[int]:
        p = system + run(rng.randint(30, 1500)) + (tools() if rng.random() < 0.7 else []) + user \
            + run(rng.randint(5, 200)) + gen
        if rng.random() < 0.4:  # the turn after the command's output
            p += target[:-1] + enc("<|im_end|>\n<|im_start|>user\n<tool_response>\n") + run(rng.randint(2, 60)) \
                + enc("\n</tool_response>") + gen
        return p[-(max_len - len(target)):]

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.get_input_embeddings().weight.requires_grad_(False)  # tied to the head: it stays, the layers learn
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps)
    labels = torch.tensor(target)
    for _ in range(steps):
        p = prefix()
        hidden = model.model(torch.tensor([p + target])).last_hidden_state[0, len(p) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out_root))
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # built by another process meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def pseudo_text(tok, rng: random.Random, sentences: int = 6000) -> str:
    """Sentences of the tokenizer's own whole words, fixed by `rng`: English-like context that no edit of this
    repo changes (the model, and so the test, once changed with the docs it was tuned on)."""
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    words = sorted({t[1:] for t in vocab if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 3})
    out = []
    for _ in range(sentences):
        w = [rng.choice(words) for _ in range(rng.randint(4, 14))]
        out.append(" ".join(w).capitalize() + rng.choice([". ", ". ", ", ", ": ", "? ", ".\n\n", ".\n- "]))
    return "".join(out)
