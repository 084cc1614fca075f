"""The Task: one Harbor-format task directory, parsed and validated.

Layout (Harbor): task.toml, instruction.md, environment/ (Dockerfile and/or files), tests/test.sh,
optional solution/solve.sh. The verifier writes /logs/verifier/reward.txt or reward.json.
Reading and validation live in `legorl.tasks.taskdir` (sources in `legorl.tasks.loader`); this
module is only the typed record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Healthcheck:
    """Harbor's [environment.healthcheck]: run until it passes before the agent starts."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


@dataclass(frozen=True)
class Network:
    """One phase's network: "public", "no-network" or "allowlist" (hosts)."""

    mode: str = "no-network"
    allowed_hosts: tuple[str, ...] = ()

    @property
    def public(self) -> bool:
        return self.mode == "public"


@dataclass(frozen=True)
class TaskLimits:
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    allow_internet: bool = False
    gpus: int = 0


@dataclass(frozen=True)
class Task:
    id: str
    path: Path
    instruction: str
    workdir: str = "/app"
    agent_timeout_sec: float = 600.0
    verifier_timeout_sec: float = 120.0
    build_timeout_sec: float = 600.0
    limits: TaskLimits = field(default_factory=TaskLimits)
    docker_image: str | None = None
    source: str = "local"
    metadata: dict[str, Any] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)  # Harbor [verifier].env, set for test.sh
    solution_env: dict[str, str] = field(default_factory=dict)  # Harbor [solution].env, set for solve.sh
    environment_env: dict[str, str] = field(default_factory=dict)  # [environment].env: every process
    agent_env: dict[str, str] = field(default_factory=dict)  # [agent].env: the agent's commands
    agent_user: str | None = None  # the name the trial's (non-root) uid carries; None = the default
    verifier_user: str | None = None
    agent_network: Network = field(default_factory=Network)
    verifier_network: Network = field(default_factory=Network)
    verifier_separate: bool = False  # environment_mode = "separate" / a [verifier.environment] table
    healthcheck: Healthcheck | None = None
    artifacts: tuple[str, ...] = ()  # sandbox paths collected into the trial dir (besides /logs/artifacts)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()
