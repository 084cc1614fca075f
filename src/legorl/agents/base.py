"""Scaffold interface: an agent harness that solves one task in one sandbox, talking to the policy
only through the per-session proxy URLs it is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from legorl.env.base import Sandbox
from legorl.plugins import load_object

ExitStatus = Literal["submitted", "finished", "turn_limit", "no_action_limit", "context_overflow", "error"]


@dataclass(frozen=True)
class SessionEndpoint:
    """Where a scaffold reaches the policy: one proxy session, in both protocols."""

    openai_base_url: str  # ends in /v1
    anthropic_base_url: str  # the SDK appends /v1/messages
    model: str = "policy"
    api_key: str = "legorl"  # the proxy ignores it; SDKs insist on one


@dataclass
class ScaffoldLimits:
    max_turns: int = 30
    timeout_sec: float = 600.0
    command_timeout_sec: float = 60.0
    max_output_chars: int = 8000
    max_tokens_per_call: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    max_no_action: int = 3


@dataclass
class ScaffoldResult:
    exit_status: ExitStatus
    turns: int = 0
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Scaffold(Protocol):
    name: ClassVar[str]

    async def run(
        self,
        instruction: str,
        sandbox: Sandbox,
        endpoint: SessionEndpoint,
        limits: ScaffoldLimits,
        log_dir: Path,
    ) -> ScaffoldResult: ...


SCAFFOLDS: dict[str, str] = {}  # name -> "module:Class", filled by register_scaffold and built-ins


def register_scaffold(name: str, target: str) -> None:
    """Make `name` resolve to the class at import path `module:Class` (lazy: imported on use)."""
    SCAFFOLDS[name] = target


def load_scaffold(spec: str, **kwargs: Any) -> Scaffold:
    """A scaffold instance from a registered name or an import path `module:Class`."""
    return load_object(spec, SCAFFOLDS, "scaffold")(**kwargs)
