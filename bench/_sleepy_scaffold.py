"""A seeded long-tail agentic workload: a scaffold whose tool calls take heavy-tailed time, and its tasks.

Agent RL trials spend most of their wall time in tools (builds, test suites, package installs), and
that time is heavy-tailed: most environments answer in seconds, a few take ten times longer. Each
trial draws its environment's tool latency L once from a lognormal (median `median_s`, p99 =
`p99_factor` x median: sigma = ln(p99_factor) / z_0.99); each of its `turns` turns is one real
generation on the policy followed by a sandbox command that takes L. Draws come from one seeded
stream per `stream` name, in trial start order, so two runs of the same workload (sync and async
modes) see the same latencies for their first N trials. Used by bench/async.py and the async tests
(`time_scale` shrinks every sleep for tests).

    [agent]
    name = "_sleepy_scaffold:SleepyScaffold"      # with bench/ on sys.path
    kwargs = {turns = 3, median_s = 2.0, p99_factor = 10.0, seed = 0, stream = "sync"}
"""

from __future__ import annotations

import math
import random
import threading
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.env.base import Sandbox

Z99 = 2.3263478740408408  # standard normal 0.99 quantile

_streams: dict[tuple[str, int], random.Random] = {}
_lock = threading.Lock()


def lognormal_sigma(p99_factor: float) -> float:
    """sigma of a lognormal whose p99 is `p99_factor` times its median."""
    return math.log(p99_factor) / Z99


def draw_latency(stream: str, seed: int, median_s: float, p99_factor: float) -> float:
    """The next trial's tool latency from the seeded stream `stream`."""
    with _lock:
        rng = _streams.setdefault((stream, seed), random.Random(f"{stream}:{seed}"))
        return median_s * math.exp(rng.gauss(0.0, lognormal_sigma(p99_factor)))


def reset_streams() -> None:
    with _lock:
        _streams.clear()


class SleepyScaffold:
    name: ClassVar[str] = "sleepy"
    needs_model: ClassVar[bool] = True

    def __init__(self, turns: int = 3, median_s: float = 2.0, p99_factor: float = 10.0, seed: int = 0,
                 stream: str = "default", time_scale: float = 1.0):
        self.turns, self.median_s, self.p99_factor = turns, median_s, p99_factor
        self.seed, self.stream, self.time_scale = seed, stream, time_scale

    async def run(self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits,
                  log_dir: Path) -> ScaffoldResult:
        import openai

        latency = draw_latency(self.stream, self.seed, self.median_s, self.p99_factor) * self.time_scale
        (log_dir / "tool_latency_s.txt").write_text(f"{latency:.3f}\n")
        client = openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0,
                                    timeout=limits.timeout_sec)
        messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        for turn in range(self.turns):
            r = await client.chat.completions.create(model=endpoint.model, messages=messages,  # type: ignore[arg-type]
                                                     max_tokens=limits.max_tokens_per_call,
                                                     temperature=limits.temperature)
            messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
            if turn == self.turns - 1:
                break  # the last reply ends the trial: the verifier runs next
            res = await sandbox.exec(f"sleep {latency:.3f}; echo ok", timeout=max(60.0, 3 * latency))
            messages.append({"role": "user", "content": f"exit {res.exit_code}: {res.stdout.strip()[:20]}"})
        return ScaffoldResult("finished", turns=self.turns)


TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
echo $((RANDOM % 2)) > /logs/verifier/reward.txt
"""

TASK_TOML = """schema_version = "1.4"
[verifier]
timeout_sec = 60.0
[agent]
timeout_sec = 900.0
[environment]
workdir = "/app"
"""


def make_tasks(root: Path, count: int) -> Path:
    """`count` task dirs whose verifier scores a coin flip (GRPO groups with signal, no skill needed)."""
    for i in range(count):
        d = root / f"longtail-{i}"
        (d / "environment").mkdir(parents=True, exist_ok=True)
        (d / "tests").mkdir(exist_ok=True)
        (d / "environment" / "README").write_text("nothing to do\n")
        (d / "task.toml").write_text(TASK_TOML)
        (d / "instruction.md").write_text(f"Task {i}: list the files, run the tests, then print {i + 3}.\n")
        (d / "tests" / "test.sh").write_text(TEST_SH)
        (d / "tests" / "test.sh").chmod(0o755)
    return root
