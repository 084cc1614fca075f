"""A tiny model that calls a tool: tiny-llama fine-tuned (seeded, 1,200 Adam steps on CPU, ~3 min) to answer any
ChatML conversation with one fixed reply, e.g. a Hermes `<tool_call>` of a harness's shell tool.

A random tiny model never writes a valid tool call, so a training run through a real agent CLI would
never execute a command and never show a tool output in its record. This model does, by its own
forward and sampling (no scripted engine): the prefixes it is tuned on are random token runs and slices
of this repo's docs of 30-1700 tokens, sometimes with an earlier call and a tool response, so it holds
for a harness's real ~1.3k-token prompt and for the turn after a command's output.

300 steps were not enough: the result hung on the seed, the corpus and the machine's float rounding (on an
AVX2 box the model built from the docs of 2026-12-04 wrote the whole call on none of Codex's four prompts at
T 0.5). After 1,200 steps p(the exact reply | each of Codex's prompts, T 0.5) was >= 0.997 for seeds 0, 1 and 2
and for an older docs corpus (600 steps: 0.2-1.0 at seed 0, 0.2-0.25 at seed 1).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tool_calling_model(base: Path, reply: str, steps: int = 1200, seed: int = 0, max_len: int = 1900,
                       parser_name: str = "hermes") -> Path:
    """The tuned model's directory, built once per machine (next to the prepared models, as tiny-llama is)."""
    from legorl.models.store import legorl_home

    out_root = legorl_home() / "models" / "tests"
    out_root.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{base}:{reply}:{steps}:{seed}:{max_len}:{parser_name}:3".encode()).hexdigest()[:12]
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
    corpus = enc("".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))[:6]))
    rng = random.Random(seed)
    torch.set_num_threads(1)  # tiny ops: more threads only spin against each other on a loaded machine
    parser = get_parser(parser_name)
    tool_name = json.loads(reply[reply.index("{"):reply.rindex("}") + 1])["name"]
    torch.manual_seed(seed)

    def run(n: int) -> list[int]:
        if rng.random() < 0.5:
            return [rng.randrange(200, 20000) for _ in range(n)]
        start = rng.randrange(0, len(corpus) - n)
        return corpus[start:start + n]

    def tools() -> list[int]:  # the proxy's tool instructions, as it renders them for a harness's tool list
        specs = [ToolSpec(name, enc_text(40), {"type": "object", "properties": {"a": {"type": "string"}}})
                 for name in (tool_name, *(f"t{rng.randrange(1000)}" for _ in range(rng.randint(0, 3))))]
        rng.shuffle(specs)
        return enc("\n\n" + parser.system_prompt(specs))

    def enc_text(n: int) -> str:
        return tok.decode(run(n))

    def prefix() -> list[int]:
        p = system + run(rng.randint(30, 1500)) + (tools() if rng.random() < 0.7 else []) + user \
            + run(rng.randint(5, 200)) + gen
        if rng.random() < 0.4:  # the turn after the command's output
            p += target[:-1] + enc("<|im_end|>\n<|im_start|>user\n<tool_response>\n") + run(rng.randint(2, 60)) \
                + enc("\n</tool_response>") + gen
        return p[-(max_len - len(target)):]

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
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
