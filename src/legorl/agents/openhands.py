"""OpenHands (`openhands-sdk`) as a legorl scaffold: configuration only, on this Python.

openhands-sdk requires Python >= 3.12 and legorl supports 3.11, so the SDK cannot be imported here.
This adapter produces what an OpenHands run needs to reach the trial's proxy session (the LLM block
with a custom base URL, the env vars its CLI reads), and `run` fails at once with an error that
names the Python requirement, rather than failing deep inside a trial.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.env.base import Sandbox

REQUIRED = (3, 12)


class OpenHandsUnavailableError(RuntimeError):
    """OpenHands cannot run from this installation (its SDK needs a newer Python)."""


def openhands_llm_config(endpoint: SessionEndpoint, limits: ScaffoldLimits) -> dict[str, Any]:
    """The SDK's `LLM(...)` arguments for an OpenAI-compatible endpoint (LiteLLM `openai/` prefix)."""
    return {
        "model": f"openai/{endpoint.model}",
        "base_url": endpoint.openai_base_url,
        "api_key": endpoint.api_key,
        "temperature": limits.temperature,
        "top_p": limits.top_p,
        "max_output_tokens": limits.max_tokens_per_call,
        "native_tool_calling": True,
        "drop_params": True,
        "num_retries": 2,
    }


def openhands_env(endpoint: SessionEndpoint) -> dict[str, str]:
    """The variables OpenHands' CLI and server read for their model."""
    return {
        "LLM_MODEL": f"openai/{endpoint.model}",
        "LLM_BASE_URL": endpoint.openai_base_url,
        "LLM_API_KEY": endpoint.api_key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def python_version(python: str) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, None when it cannot be run."""
    path = shutil.which(python) or python
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except OSError:
        return None
    m = re.search(r"Python (\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


class OpenHands:
    """Options: `python` (an interpreter to run OpenHands with; it must be >= 3.12)."""

    name: ClassVar[str] = "openhands"

    def __init__(self, python: str = "python3.12") -> None:
        self.python = python

    def config(self, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> dict[str, Any]:
        return {
            "llm": openhands_llm_config(endpoint, limits),
            "env": openhands_env(endpoint),
            "max_iterations": limits.max_turns,
            "command_timeout_sec": limits.command_timeout_sec,
        }

    def check(self) -> None:
        """Raises OpenHandsUnavailableError saying what is missing."""
        need = ".".join(map(str, REQUIRED))
        found = python_version(self.python)
        if found is None or found < REQUIRED:
            have = "not found" if found is None else ".".join(map(str, found))
            raise OpenHandsUnavailableError(
                f"OpenHands (openhands-sdk) requires Python >= {need}; interpreter {self.python!r}: {have}. "
                "legorl runs on Python 3.11, so OpenHands cannot run in-process here: use the mini-swe-agent, "
                "claude-code or opencode scaffolds, or pass python=<a Python >= 3.12 with openhands-sdk>."
            )
        raise OpenHandsUnavailableError(
            f"a Python {'.'.join(map(str, found))} interpreter was found, but legorl's OpenHands runner is not "
            "implemented yet: only its configuration is (OpenHands.config)."
        )

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "openhands-config.json").write_text(json.dumps(self.config(endpoint, limits), indent=1))
        self.check()
        raise AssertionError("unreachable: check() always raises")
