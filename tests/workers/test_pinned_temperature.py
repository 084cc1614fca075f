"""A harness that always asks for its own temperature (Claude Code sends 1.0) still samples at the trial's
temperature, so the trainer, which scores tokens at the run's temperature, sees the distribution that sampled
them; `agent.pin_temperature = false` lets the harness's value through. Real proxy, worker, sandbox and
verifier; the engine is the replay double (tests/workers/scripted.py), which records what it was asked."""

from __future__ import annotations

import openai
import pytest

from legorl.agents.base import ScaffoldLimits, ScaffoldResult
from legorl.config import load_config
from legorl.workers import ProxyEndpoints, TrialSpec, WorkerConfig, run_trials
from legorl.workers.config import worker_config

from .conftest import replay_proxy


class FixedTemperatureScaffold:
    """Asks for temperature 1.0 whatever the trial's limits say, as Claude Code does."""

    name = "test-fixed-temperature"

    async def run(self, instruction, sandbox, endpoint, limits, log_dir) -> ScaffoldResult:
        client = openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key="x")
        for _ in range(2):
            await client.chat.completions.create(model=endpoint.model, temperature=1.0, max_tokens=8,
                                                 messages=[{"role": "user", "content": instruction}])
        return ScaffoldResult("finished", turns=2)


@pytest.mark.parametrize("pin", [True, False])
async def test_a_harness_temperature_is_pinned_to_the_trial(pin, tokenizer, shell_tasks, tmp_path, sandbox_root):
    server, engine = await replay_proxy(tokenizer, ["ok", "ok"])
    cfg = WorkerConfig(scaffold=f"{__name__}:FixedTemperatureScaffold", output_root=tmp_path, exp_name="t",
                       limits=ScaffoldLimits(max_turns=2, max_tokens_per_call=8, temperature=0.7),
                       sandbox_opts={"root_dir": sandbox_root}, pin_temperature=pin)
    try:
        (res,) = await run_trials([TrialSpec(shell_tasks["rename-file"])], ProxyEndpoints(server), cfg)
    finally:
        await server.close()
    assert res.outcome == "failed", res.reason
    assert [r.sampling.temperature for r in engine.requests] == ([0.7, 0.7] if pin else [1.0, 1.0])
    assert res.metadata["counters"]["temperature_pinned"] == (2 if pin else 0)


def test_the_run_config_pins_by_default():
    assert worker_config(load_config(None, [])).pin_temperature
    assert not worker_config(load_config(None, ["agent.pin_temperature=false"])).pin_temperature
