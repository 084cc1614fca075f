"""Trials recorded from the real engine the way the proxy records them (for trainer tests)."""

from __future__ import annotations

from pathlib import Path

from legorl.models.chat import chat_ids
from legorl.serving.types import GenerateRequest, SamplingParams
from legorl.tasks.model import Task
from legorl.trial import TrialResult, TrialSpec, TrialTokens


def trial(trial_id: str, task_id: str, token_ids: list[int], mask: list[int], logprobs: list[float],
          reward: float = 0.0, group_id: str = "", **tokens) -> TrialResult:
    """A finished trial with these tokens (`tokens`: weight_versions, routed_experts)."""
    spec = TrialSpec(Task(task_id, Path("."), "unused"), group_id=group_id, trial_id=trial_id)
    return TrialResult(spec, "solved" if reward >= 1 else "failed", "", reward,
                       TrialTokens(token_ids, mask, logprobs, **tokens))


async def multi_turn_rollouts(engine, tok, n: int, temperature: float = 1.0) -> list[TrialResult]:
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
        out.append(trial(f"t{i}", f"task{i % 2}", toks, mask, lps, reward=float(i % 2), group_id=f"g{i // 2}"))
    return out
