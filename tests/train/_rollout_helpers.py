"""Rollouts recorded from the real engine the way the proxy records them (for trainer tests)."""

from __future__ import annotations

from legorl.models.chat import chat_ids
from legorl.rollout import Rollout
from legorl.serving.types import GenerateRequest, SamplingParams


async def multi_turn_rollouts(engine, tok, n: int, temperature: float = 1.0) -> list[Rollout]:
    """Two policy turns separated by a tool-result turn (mask 0), as the proxy would record them."""
    out = []
    for i in range(n):
        ids = chat_ids(tok, [{"role": "user", "content": f"task {i}: list files"}])
        sp = SamplingParams(temperature=temperature, max_tokens=12, seed=i)
        g1 = await engine.generate(GenerateRequest(ids, sp))
        tool = tok("<|im_end|>\n<|im_start|>tool\nfile.txt<|im_end|>\n<|im_start|>assistant\n",
                   add_special_tokens=False)["input_ids"]
        p2 = ids + g1.token_ids + tool
        g2 = await engine.generate(GenerateRequest(p2, sp))
        toks = p2 + g2.token_ids
        mask = [0] * len(ids) + [1] * len(g1.token_ids) + [0] * len(tool) + [1] * len(g2.token_ids)
        lps = [0.0] * len(ids) + g1.logprobs + [0.0] * len(tool) + g2.logprobs
        out.append(Rollout(f"t{i}", f"task{i % 2}", toks, mask, lps, reward=float(i % 2), group_id=f"g{i // 2}"))
    return out
