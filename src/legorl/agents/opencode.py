"""OpenCode (npm `opencode-ai`) as a legorl scaffold.

Like Claude Code, OpenCode runs its tools in its own process, so `opencode run` runs inside the
trial's sandbox behind the relay (`bridge_sandbox`). Its model is a generated `opencode.json`
provider on `@ai-sdk/openai-compatible` whose baseURL is the relay, i.e. exactly this trial's proxy
session. Config and state stay in the sandbox (XDG dirs under /logs/agent/opencode). Install it with
`legorl agents install opencode`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.bridge_sandbox import OOM_NOTE, RELAY_MOUNT, CliRun, relay_base_url, run_cli_in_sandbox
from legorl.agents.install import find_binary
from legorl.env.base import Sandbox

PROVIDER = "legorl"
STATE = "/logs/agent/opencode"
DEFAULT_TOOLS = ("bash", "read", "edit", "write")
# Named one by one as well: some (edit, write) ignore the "*" pattern and follow the edit permission.
KNOWN_TOOLS = ("bash", "read", "edit", "write", "multiedit", "patch", "apply_patch", "glob", "grep", "list",
               "todowrite", "todoread", "webfetch", "websearch", "task", "skill", "question", "lsp")
DEFAULT_PROMPT = (
    "You are a coding agent in a Linux sandbox. Solve the task with your tools: run shell commands with "
    "bash, read and edit files in the current directory. When done, reply with a one-line summary."
)


def opencode_config(
    endpoint: SessionEndpoint,
    limits: ScaffoldLimits,
    base_url: str | None = None,
    context_window: int = 32768,
    tools: tuple[str, ...] = DEFAULT_TOOLS,
    prompt: str | None = DEFAULT_PROMPT,
) -> dict[str, Any]:
    """An opencode.json whose only provider is the proxy session (OpenAI-compatible chat completions),
    with a short prompt and few tools (small models have small windows), `max_turns` steps."""
    model = {
        "name": endpoint.model,
        "tool_call": True,
        "temperature": True,
        "limit": {"context": context_window, "output": limits.max_tokens_per_call},
        "options": {"temperature": limits.temperature, "topP": limits.top_p},
    }
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "legorl proxy",
                "options": {"baseURL": base_url or f"{relay_base_url()}/v1", "apiKey": endpoint.api_key},
                "models": {endpoint.model: model},
            }
        },
        "model": f"{PROVIDER}/{endpoint.model}",
        "small_model": f"{PROVIDER}/{endpoint.model}",
        "enabled_providers": [PROVIDER],
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow" if {"edit", "write"} & set(tools) else "deny", "bash": "allow",
                       "webfetch": "deny"},
        "tools": {"*": False, **{t: t in tools for t in KNOWN_TOOLS}, **{t: True for t in tools}},
        "agent": {
            "build": {"steps": limits.max_turns, **({"prompt": prompt} if prompt else {})},
            "title": {"disable": True},  # a side call per trial that trains nothing
        },
    }


class OpenCode:
    """Options: `context_window` (what OpenCode is told the model holds), `tools`, `prompt` (None:
    OpenCode's own), `extra_args`, `binary`."""

    name: ClassVar[str] = "opencode"

    def __init__(self, context_window: int = 32768, tools: tuple[str, ...] = DEFAULT_TOOLS,
                 prompt: str | None = DEFAULT_PROMPT, extra_args: list[str] | None = None,
                 binary: str | None = None) -> None:
        self.context_window = context_window
        self.tools = tuple(tools)
        self.prompt = prompt
        self.extra_args = list(extra_args or [])
        self.binary = binary

    def args(self, instruction: str, endpoint: SessionEndpoint) -> list[str]:
        return ["run", "--format", "json", "--model", f"{PROVIDER}/{endpoint.model}", *self.extra_args, instruction]

    def environment(self, limits: ScaffoldLimits) -> dict[str, str]:
        return {
            "OPENCODE_CONFIG": f"{RELAY_MOUNT}/opencode.json",
            "OPENCODE_DISABLE_AUTOUPDATE": "true",
            "OPENCODE_DISABLE_MODELS_FETCH": "true",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "true",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
            "OPENCODE_DISABLE_SHARE": "true",
            "OPENCODE_DISABLE_AUTOCOMPACT": "true",  # overflow ends the run rather than looping on compaction
            "OPENCODE_DISABLE_PROJECT_CONFIG": "true",  # a task's own opencode.json must not reconfigure it
            "OPENCODE_DISABLE_CLAUDE_CODE": "true",
            "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS": str(int(limits.command_timeout_sec * 1000)),
            "XDG_CONFIG_HOME": f"{STATE}/config",
            "XDG_DATA_HOME": f"{STATE}/data",
            "XDG_CACHE_HOME": f"{STATE}/cache",
            "XDG_STATE_HOME": f"{STATE}/state",
        }

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        binary = Path(self.binary) if self.binary else find_binary("opencode")
        config = opencode_config(endpoint, limits, context_window=self.context_window, tools=self.tools,
                                 prompt=self.prompt)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "opencode.json").write_text(json.dumps(config, indent=1))
        run = await run_cli_in_sandbox(
            sandbox, binary, self.args(instruction, endpoint), endpoint=endpoint, env=self.environment(limits),
            timeout=limits.timeout_sec, log_dir=log_dir, log_name="opencode",
            files={"opencode.json": json.dumps(config)},
        )
        return parse_events(run)


def parse_events(run: CliRun) -> ScaffoldResult:
    """The outcome from `opencode run --format json` events (one JSON object per line)."""
    events = run.events()
    kinds = [str(e.get("type", "")) for e in events]
    steps = kinds.count("step_start") or kinds.count("step-start")
    tools = sum(1 for k in kinds if k in ("tool_use", "tool"))
    errors = [e for e in events if e.get("type") == "error"]
    meta: dict[str, Any] = {"returncode": run.exit_code, "relay_requests": run.relay_requests, "events": len(events),
                            "tool_uses": tools}
    if run.timed_out:
        return ScaffoldResult("error", steps, "opencode ran past its time limit and was killed", meta)
    if run.oom_killed:
        return ScaffoldResult("error", steps, f"opencode {OOM_NOTE}", meta)
    if errors or run.exit_code != 0:
        text = json.dumps(errors[-1])[-600:] if errors else (run.stderr.strip() or run.stdout.strip())[-600:]
        lowered = text.lower()
        if "context" in lowered and ("length" in lowered or "window" in lowered):
            return ScaffoldResult("context_overflow", steps, None, meta)
        return ScaffoldResult("error", steps, f"opencode failed (status {run.exit_code}): {text}", meta)
    return ScaffoldResult("finished", steps, None, meta)
