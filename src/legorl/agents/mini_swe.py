"""mini-swe-agent (PyPI `mini-swe-agent` v2) as a legorl scaffold.

`mini` runs unmodified as a host subprocess. Its model is pointed at the trial's proxy session
(LiteLLM `openai/<model>` with `api_base` = the session's OpenAI URL), and its environment class is
`legorl.agents.bridge_env.BridgeEnvironment`, which sends every command over the exec bridge into the
trial's sandbox. So mini holds no sandbox and no network path except the proxy session, and every
model call is captured by the proxy like any other scaffold's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.bridge import SOCKET_ENV, TOKEN_ENV, ExecBridge, run_host_process
from legorl.agents.install import AgentNotInstalledError
from legorl.env.base import Sandbox

ENV_CLASS = "legorl.agents.bridge_env.BridgeEnvironment"
# mini's exit statuses -> ours; anything else (an exception's class name) is an error.
_EXIT = {
    "Submitted": "submitted",
    "LimitsExceeded": "turn_limit",
    "RepeatedFormatError": "no_action_limit",
    "ContextWindowExceededError": "context_overflow",
}


def _check_installed(python: str) -> None:
    if python == sys.executable and importlib.util.find_spec("minisweagent") is None:
        raise AgentNotInstalledError("mini-swe-agent")


class MiniSweAgent:
    """Options: `config` (mini's base config, default its `mini.yaml`: native tool calls; `mini_textbased.yaml`
    is its text protocol, a fenced `mswea_bash_command` block per reply, which small models follow far more
    often), `overrides` (merged last, same nesting as mini's YAML), `python` (an interpreter with minisweagent
    and legorl importable), `model_class` (mini's LiteLLM model class; default `litellm_textbased` for a
    config whose name says textbased, else `litellm`)."""

    name: ClassVar[str] = "mini-swe-agent"

    def __init__(
        self, config: str = "mini.yaml", overrides: dict[str, Any] | None = None, python: str | None = None,
        model_class: str | None = None,
    ) -> None:
        self.config = config
        self.model_class = model_class or ("litellm_textbased" if "textbased" in Path(config).name else "litellm")
        self.overrides = overrides or {}
        self.python = python or sys.executable

    def build_config(self, instruction: str, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> dict[str, Any]:
        """Our layer over mini's config: the task, the proxy as model, the bridge as environment."""
        return {
            "run": {"task": instruction},
            "agent": {
                "agent_class": "default",  # non-interactive: no confirmations, no TTY
                "step_limit": limits.max_turns,
                "cost_limit": 0,  # the proxy has no prices; turns and time bound the run
                "max_consecutive_format_errors": limits.max_no_action,
            },
            "environment": {"environment_class": ENV_CLASS, "timeout": int(limits.command_timeout_sec), "cwd": ""},
            "model": {
                "model_class": self.model_class,
                "model_name": f"openai/{endpoint.model}",
                "cost_tracking": "ignore_errors",
                "model_kwargs": {
                    "api_base": endpoint.openai_base_url,
                    "api_key": endpoint.api_key,
                    "temperature": limits.temperature,
                    "top_p": limits.top_p,
                    "max_tokens": limits.max_tokens_per_call,
                    "drop_params": True,
                },
            },
        }

    def command(self, config_file: Path, traj: Path) -> list[str]:
        return [self.python, "-m", "minisweagent.run.mini", "-c", self.config, "-c", str(config_file),
                "-o", str(traj), "-y", "--exit-immediately"]

    def environment(self, home: Path, endpoint: SessionEndpoint, bridge: ExecBridge) -> dict[str, str]:
        """A clean environment: nothing of the trainer's (keys, proxies) reaches the agent process."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(home),
            "TMPDIR": str(home),
            "NO_PROXY": "127.0.0.1,localhost",
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_GLOBAL_CONFIG_DIR": str(home / "mini-config"),
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "3",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # LiteLLM would fetch its price list from the internet
            "OPENAI_API_KEY": endpoint.api_key,
            SOCKET_ENV: bridge.socket_path,
            TOKEN_ENV: bridge.token,
        }

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        _check_installed(self.python)
        log_dir.mkdir(parents=True, exist_ok=True)
        config = _merge(self.build_config(instruction, endpoint, limits), self.overrides)
        config_file = log_dir / "mini-legorl.yaml"
        config_file.write_text(json.dumps(config, indent=1))  # JSON is YAML: no YAML writer needed
        traj = log_dir / "mini.traj.json"
        home = Path(tempfile.mkdtemp(prefix="legorl-mini-"))
        try:
            async with ExecBridge(sandbox, command_timeout=limits.command_timeout_sec) as bridge:
                run = await run_host_process(
                    self.command(config_file, traj), env=self.environment(home, endpoint, bridge), cwd=home,
                    log_path=log_dir / "mini.log", timeout=limits.timeout_sec + 5,
                )
                (log_dir / "bridge_commands.json").write_text(json.dumps(bridge.commands, indent=1))
                commands = bridge.calls
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return self._result(traj, run.exit_code, run.timed_out, commands, log_dir / "mini.log")

    def _result(self, traj: Path, rc: int, timed_out: bool, commands: int, log: Path) -> ScaffoldResult:
        meta: dict[str, Any] = {"returncode": rc, "commands": commands, "trajectory": str(traj)}
        try:
            info = json.loads(traj.read_text()).get("info", {})
        except (OSError, ValueError):
            info = {}
        calls = int(info.get("model_stats", {}).get("api_calls", 0))
        raw = str(info.get("exit_status", ""))
        meta["mini_exit_status"] = raw
        if timed_out:
            return ScaffoldResult("error", calls, "mini-swe-agent ran past its time limit and was killed", meta)
        if raw in _EXIT:
            return ScaffoldResult(_EXIT[raw], calls, None, meta)  # type: ignore[arg-type]
        if not info:
            why = f"mini-swe-agent exited with status {rc} and wrote no trajectory: {_tail(log)}"
            return ScaffoldResult("error", calls, why, meta)
        return ScaffoldResult("error", calls, f"mini-swe-agent stopped with {raw or 'no exit status'}", meta)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _tail(path: Path, n: int = 400) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except OSError:
        return "(no log)"
