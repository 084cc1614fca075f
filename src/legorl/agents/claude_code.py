"""Claude Code (npm `@anthropic-ai/claude-code`) as a legorl scaffold.

Claude Code runs its Bash/Edit tools in its own process, so the `claude` binary itself runs *inside*
the trial's sandbox (`bridge_sandbox`): headless `claude -p ... --output-format stream-json`, its
Anthropic base URL the in-sandbox relay, which reaches exactly this trial's proxy session. Its
home and config live in the sandbox (config and transcripts under /logs/agent/claude), never the
host's. Install it with `legorl agents install claude-code`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ExitStatus, ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.bridge_sandbox import OOM_NOTE, CliRun, relay_base_url, run_cli_in_sandbox
from legorl.agents.install import find_binary
from legorl.env.base import Sandbox

# Small models have small windows: a short system prompt and a few tools keep the first call inside
# them. Pass system_prompt=None (and tools="default") for Claude Code's own, much longer, prompt.
DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in a Linux sandbox. Solve the user's task by using your tools: "
    "run shell commands with Bash, read and edit files. The task's files are in the current directory. "
    "When the task is done, reply with a short summary and no tool call."
)
DEFAULT_TOOLS = "Bash,Read,Edit,Write"


class ClaudeCode:
    """Options: `tools` (Claude Code's --tools list), `system_prompt` (None: Claude Code's default),
    `extra_args` (appended to the command line), `binary` (path to `claude`, else the installed one)."""

    name: ClassVar[str] = "claude-code"

    def __init__(
        self,
        tools: str = DEFAULT_TOOLS,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        extra_args: list[str] | None = None,
        binary: str | None = None,
    ) -> None:
        self.tools = tools
        self.system_prompt = system_prompt
        self.extra_args = list(extra_args or [])
        self.binary = binary

    def args(self, instruction: str, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> list[str]:
        a = ["-p", instruction, "--output-format", "stream-json", "--verbose",
             "--dangerously-skip-permissions", "--max-turns", str(limits.max_turns),
             "--model", endpoint.model, "--tools", self.tools, "--no-session-persistence"]
        if self.system_prompt is not None:
            a += ["--system-prompt", self.system_prompt]
        return a + self.extra_args

    def environment(self, endpoint: SessionEndpoint, limits: ScaffoldLimits) -> dict[str, str]:
        ms = str(int(limits.command_timeout_sec * 1000))
        return {
            "ANTHROPIC_BASE_URL": relay_base_url(),
            "ANTHROPIC_AUTH_TOKEN": endpoint.api_key,
            "ANTHROPIC_MODEL": endpoint.model,
            "ANTHROPIC_SMALL_FAST_MODEL": endpoint.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": endpoint.model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": endpoint.model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": endpoint.model,
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(limits.max_tokens_per_call),
            "MAX_THINKING_TOKENS": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "BASH_DEFAULT_TIMEOUT_MS": ms,
            "BASH_MAX_TIMEOUT_MS": ms,
            "BASH_MAX_OUTPUT_LENGTH": str(limits.max_output_chars),
            "CLAUDE_CONFIG_DIR": "/logs/agent/claude",
            "IS_SANDBOX": "1",  # lets permission skipping run where the sandbox user is root (containers)
        }

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        binary = Path(self.binary) if self.binary else find_binary("claude-code")
        run = await run_cli_in_sandbox(
            sandbox, binary, self.args(instruction, endpoint, limits), endpoint=endpoint,
            env=self.environment(endpoint, limits), timeout=limits.timeout_sec, log_dir=log_dir,
            log_name="claude",
        )
        return parse_stream(run)


def parse_stream(run: CliRun) -> ScaffoldResult:
    """The outcome from Claude Code's stream-json: its final `result` event, else the exit status."""
    events = run.events()
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    tools = sum(
        1 for e in events if e.get("type") == "assistant"
        for c in (e.get("message") or {}).get("content") or [] if isinstance(c, dict) and c.get("type") == "tool_use"
    )
    meta: dict[str, Any] = {"returncode": run.exit_code, "relay_requests": run.relay_requests, "tool_uses": tools,
                            "events": len(events)}
    if run.timed_out:
        return ScaffoldResult("error", 0, "claude ran past its time limit and was killed", meta)
    if run.oom_killed and result is None:
        return ScaffoldResult("error", 0, f"claude {OOM_NOTE}", meta)
    if result is None:
        why = (run.stderr.strip() or run.stdout.strip())[-600:] or "no output"
        return ScaffoldResult("error", 0, f"claude exited with status {run.exit_code} and no result: {why}", meta)
    subtype = str(result.get("subtype", ""))
    turns = int(result.get("num_turns") or 0)
    meta["claude_subtype"] = subtype
    text = str(result.get("result") or "")
    status: ExitStatus = "finished"
    error = None
    errors = [str(e["error"]) for e in events if e.get("type") == "assistant" and e.get("error")]
    if errors:
        meta["claude_errors"] = errors
    if subtype == "error_max_turns":
        status = "turn_limit"
    elif errors and set(errors) <= {"max_output_tokens"}:
        status = "finished"  # the policy's last reply ran past max_tokens_per_call: its fault, not the run's
    elif result.get("is_error") or subtype != "success":
        lowered = text.lower()
        overflow = "context" in lowered or "too long" in lowered
        status = "context_overflow" if overflow else "error"
        error = None if overflow else (text[-600:] or subtype or "claude reported an error")
    return ScaffoldResult(status, turns, error, meta)
