"""Worker settings: what to run (scaffold, limits), where (sandbox backend) and how many at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.agents.base import ScaffoldLimits
from legorl.config.run import RunConfig
from legorl.workers.harness import Harness


@dataclass
class WorkerConfig:
    """Plain data, so a Ray actor can be built from it later.

    Concurrency has one knob per resource: `max_trials` bounds trials in flight (incl. verification),
    `max_sandboxes` live sandboxes, `max_scaffolds` scaffolds talking to the policy at once.
    A trial takes a sandbox before a scaffold slot, always in that order (no deadlock).
    """

    scaffold: str = "builtin"  # registered name or "module:Class"
    scaffold_kwargs: dict[str, Any] = field(default_factory=dict)
    harnesses: list[Harness] = field(default_factory=list)  # a mix: replaces scaffold/scaffold_kwargs when set
    limits: ScaffoldLimits = field(default_factory=ScaffoldLimits)
    backend: str = "local"
    sandbox_opts: dict[str, Any] = field(default_factory=dict)
    max_trials: int = 16
    max_sandboxes: int = 16
    max_scaffolds: int = 16
    agent_timeout_sec: float | None = None  # None: the task's [agent] timeout_sec
    verifier_timeout_sec: float | None = None  # None: the task's [verifier] timeout_sec
    min_memory_mb: int | None = None  # raise a task's memory_mb to at least this (sandbox.min_memory_mb)
    setup_timeout_sec: float | None = None  # None: the task's build_timeout_sec
    grace_sec: float = 15.0  # extra wall time before a hung verifier / sandbox call is abandoned
    output_root: Path | None = None  # artifacts under <root>/trials/<exp>/step_<n>/<trial_id>/
    exp_name: str = "default"
    zero_reward_on_tamper: bool = True  # a verifier guard flag (reward hacking attempt) scores 0
    pin_temperature: bool = True  # every call of a trial samples at `limits.temperature` (agent.pin_temperature)

    def __post_init__(self) -> None:
        for name in ("max_trials", "max_sandboxes", "max_scaffolds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.output_root is not None:
            self.output_root = Path(self.output_root)

    def harness_mix(self) -> list[Harness]:
        """The harnesses trials choose from: the mix, or the one scaffold."""
        return list(self.harnesses) or [Harness(self.scaffold, dict(self.scaffold_kwargs))]


def worker_config(cfg: RunConfig, output_root: Path | None = None) -> WorkerConfig:
    """A training run's worker settings, from its `agent`, `sandbox` and `rollout` sections."""
    agent, rollout = cfg.agent, cfg.rollout
    limits = ScaffoldLimits(max_turns=rollout.max_turns, max_tokens_per_call=rollout.max_response_len,
                            temperature=rollout.temperature, top_p=rollout.top_p,
                            command_timeout_sec=agent.command_timeout_sec)
    n = rollout.concurrency
    return WorkerConfig(
        scaffold=agent.name, scaffold_kwargs=dict(agent.kwargs), limits=limits, backend=cfg.sandbox.backend,
        harnesses=[Harness(h.name, dict(h.kwargs), h.weight, h.label or "") for h in agent.mix],
        max_trials=n, max_sandboxes=n, max_scaffolds=n, agent_timeout_sec=agent.timeout_sec,
        verifier_timeout_sec=cfg.sandbox.verifier_timeout_sec, min_memory_mb=cfg.sandbox.min_memory_mb,
        output_root=output_root, exp_name=cfg.run.name,
        pin_temperature=agent.pin_temperature,
    )
