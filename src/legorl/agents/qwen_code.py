"""Qwen Code (npm `@qwen-code/qwen-code`) as a legorl scaffold.

Qwen Code runs its shell tool in its own process, so, like the other CLIs, it runs inside the trial's
sandbox behind the relay (`bridge_sandbox`); it is a node bundle, run by the sandbox's `node` (the
host's /usr/bin/node with the local backend). It speaks OpenAI chat completions to the relay's `/v1`.
It runs in `--bare` mode (no settings files, memory, skills, extensions or MCP discovery) with a short
system prompt and only the tools asked for, so its first call is ~2k tokens instead of ~8k: settings are
ignored in bare mode, so the output limit goes through `QWEN_CODE_MAX_OUTPUT_TOKENS` and, as Qwen Code
sends no temperature, the trial's temperature reaches the proxy as the relay's `X-Legorl-Temperature`
header. Install it with `legorl agents install qwen-code`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ExitStatus, ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.bridge_sandbox import OOM_NOTE, CliRun, relay_base_url, run_cli_in_sandbox
from legorl.agents.install import find_binary
from legorl.env.base import Sandbox
from legorl.proxy.headers import TEMPERATURE_HEADER

DEFAULT_TOOLS = ("run_shell_command", "read_file", "edit")
# The tools --bare offers whatever --core-tools says (0.24.4). Only these may be excluded (each costs prompt
# tokens): an excluded tool becomes a permission deny rule that also refuses shell commands doing its job
# (excluding `read_file` denies `cat f`, `edit` or `write_file` deny `echo x > f`), so the file tools stay.
EXCLUDABLE = ("notebook_edit", "get_goal", "update_goal")
DEFAULT_PROMPT = (
    "You are a coding agent in a Linux sandbox. Solve the task by running shell commands with the "
    "run_shell_command tool; the task's files are in the current directory. When the task is done, reply with a "
    "one-line summary and no tool call."
)
NODE = "/usr/bin/node"


class QwenCode:
    """Options: `tools` (Qwen Code's tool names), `prompt` (None: Qwen Code's own system prompt),
    `extra_args`, `binary` (the installed `cli-entry.js`, else found)."""

    name: ClassVar[str] = "qwen-code"

    def __init__(self, tools: tuple[str, ...] = DEFAULT_TOOLS, prompt: str | None = DEFAULT_PROMPT,
                 extra_args: list[str] | None = None, binary: str | None = None) -> None:
        self.tools = tuple(tools)
        self.prompt = prompt
        self.extra_args = list(extra_args or [])
        self.binary = binary

    def args(self, instruction: str, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> list[str]:
        excluded = [t for t in EXCLUDABLE if t not in self.tools]
        a = ["--bare", "--auth-type", "openai", "--openai-base-url", f"{relay_base_url()}/v1", "-m", endpoint.model,
             "--approval-mode", "yolo", "-o", "stream-json", "--chat-recording", "false",
             "--max-session-turns", str(limits.max_turns), "--core-tools", *self.tools, "--exclude-tools", *excluded]
        if self.prompt is not None:
            a += ["--system-prompt", self.prompt]
        # yargs does not take a positional after `--`; `--prompt=` holds any text, even one starting with "-"
        return [*a, *self.extra_args, f"--prompt={instruction}"]

    def environment(self, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> dict[str, str]:
        return {"OPENAI_API_KEY": endpoint.api_key, "QWEN_CODE_MAX_OUTPUT_TOKENS": str(limits.max_tokens_per_call),
                "NO_COLOR": "1", "CI": "1", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1", "PATH": "/usr/local/bin:/usr/bin:/bin"}

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        script = Path(self.binary) if self.binary else find_binary("qwen-code")
        node = shutil.which("node") or NODE
        args = self.args(instruction, endpoint, limits)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "qwen-args.json").write_text(json.dumps(args[:-1], indent=1))
        run = await run_cli_in_sandbox(
            sandbox, script, args, endpoint=endpoint, env=self.environment(endpoint, limits),
            timeout=limits.timeout_sec, log_dir=log_dir, log_name="qwen",
            headers={TEMPERATURE_HEADER: repr(float(limits.temperature))}, interpreter=node,
        )
        return parse_events(run)


def parse_events(run: CliRun) -> ScaffoldResult:
    """The outcome from `qwen -o stream-json` (one event per line; the last is `result`)."""
    events = run.events()
    results = [e for e in events if e.get("type") == "result"]
    uses = sum(1 for e in events if e.get("type") == "assistant"
               for c in (e.get("message") or {}).get("content") or [] if isinstance(c, dict) and c.get("type") == "tool_use")
    meta: dict[str, Any] = {"returncode": run.exit_code, "relay_requests": run.relay_requests, "events": len(events),
                            "tool_uses": uses}
    turns = run.relay_requests
    if run.timed_out:
        return ScaffoldResult("error", turns, "qwen-code ran past its time limit and was killed", meta)
    if run.oom_killed:
        return ScaffoldResult("error", turns, f"qwen-code {OOM_NOTE}", meta)
    last = results[-1] if results else None
    if last is not None and last.get("subtype") == "success" and not last.get("is_error"):
        return ScaffoldResult("finished", turns, None, meta)
    text = json.dumps(last)[-600:] if last else (run.stderr.strip() or run.stdout.strip())[-600:] or "no output"
    lowered = text.lower()
    if "max_turns" in lowered or "maximum session turns" in lowered or "max-session-turns" in lowered:
        return ScaffoldResult("turn_limit", turns, None, meta)
    if "context" in lowered and ("window" in lowered or "length" in lowered or "too long" in lowered):
        return ScaffoldResult("context_overflow", turns, None, meta)
    status: ExitStatus = "error"
    return ScaffoldResult(status, turns, f"qwen-code failed (status {run.exit_code}): {text}", meta)
