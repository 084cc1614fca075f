"""A bench scaffold that behaves like a real agent in time: model calls separated by slow tool calls.

Each turn asks the policy for a reply, then runs a command in the sandbox that sleeps (a build, a
test run). Sleep times are drawn per trial from a heavy-ish tail: mostly short, sometimes long.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.env.base import Sandbox


class SleepyScaffold:
    name: ClassVar[str] = "sleepy"
    needs_model: ClassVar[bool] = True

    def __init__(self, turns: int = 2, short: tuple[float, float] = (0.3, 1.5), long_s: float = 5.0,
                 p_long: float = 0.15):
        self.turns, self.short, self.long_s, self.p_long = turns, short, long_s, p_long

    async def run(self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits,
                  log_dir: Path) -> ScaffoldResult:
        import openai

        rng = random.Random()
        client = openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0,
                                    timeout=limits.timeout_sec)
        messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        for _ in range(self.turns):
            r = await client.chat.completions.create(model=endpoint.model, messages=messages,  # type: ignore[arg-type]
                                                     max_tokens=limits.max_tokens_per_call,
                                                     temperature=limits.temperature)
            messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
            secs = self.long_s if rng.random() < self.p_long else rng.uniform(*self.short)
            res = await sandbox.exec(f"sleep {secs:.2f}; echo ok", timeout=60)
            messages.append({"role": "user", "content": f"exit {res.exit_code}"})
        return ScaffoldResult("finished", turns=self.turns)
