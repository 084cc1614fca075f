"""Codex (npm `@openai/codex`) as a legorl scaffold.

Codex runs its shell tool in its own process, so, like Claude Code and OpenCode, `codex exec` runs
inside the trial's sandbox behind the relay (`bridge_sandbox`); the native musl binary of the platform
package is staged with its resource tree (rg, helpers), no node needed. Codex speaks the Responses
API: its only model provider is the relay (`wire_api = "responses"`, the proxy's `/v1/responses`),
keyed by an env var, so no login and no network beyond the proxy. Everything is passed as `-c`
overrides (CODEX_HOME, the trial's /logs/agent, holds only Codex's own state); Codex's own sandbox
is off (the trial's sandbox is the boundary), approvals never asked. Codex has no turn limit of its
own: the relay refuses model calls past `max_turns`. It sends no sampling options, so the limits
reach the proxy as X-Legorl-* headers. Install it with `legorl agents install codex`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ExitStatus, ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.bridge_sandbox import OOM_NOTE, RELAY_MOUNT, CliRun, relay_base_url, run_cli_in_sandbox
from legorl.agents.install import find_binary
from legorl.env.base import Sandbox
from legorl.proxy.headers import MAX_OUTPUT_HEADER, TEMPERATURE_HEADER

PROVIDER = "legorl"
KEY_ENV = "LEGORL_API_KEY"
STATE = "/logs/agent"  # CODEX_HOME must exist already: the trial's agent log dir does
PROMPT_FILE = "codex-prompt.md"
# Small models have small windows: a short prompt instead of Codex's ~17k-character one.
DEFAULT_PROMPT = (
    "You are a coding agent in a Linux sandbox. Solve the task by running shell commands with the "
    "exec_command tool; the task's files are in the current directory. When the task is done, reply with a "
    "one-line summary and no tool call."
)


def codex_overrides(
    endpoint: SessionEndpoint, limits: ScaffoldLimits, context_window: int = 32768, prompt: bool = True
) -> dict[str, Any]:
    """The config (as `-c` key -> value): the relay as the only provider, Codex's own prompt replaced
    (when `prompt`), web search, skills, sub-agents, goals, apps, update checks, analytics and history off."""
    provider = {
        "name": "legorl proxy", "base_url": f"{relay_base_url()}/v1", "env_key": KEY_ENV, "wire_api": "responses",
        "request_max_retries": 0, "stream_max_retries": 0,
        "stream_idle_timeout_ms": int(max(limits.timeout_sec, 1) * 1000),
        "http_headers": {MAX_OUTPUT_HEADER: str(limits.max_tokens_per_call),
                         TEMPERATURE_HEADER: repr(float(limits.temperature))},
    }
    cfg: dict[str, Any] = {
        "model": endpoint.model, "model_provider": PROVIDER, f"model_providers.{PROVIDER}": provider,
        "approval_policy": "never", "sandbox_mode": "danger-full-access",
        "model_context_window": context_window, "model_auto_compact_token_limit": 1 << 40,
        "model_reasoning_summary": "none", "web_search": "disabled",
        "include_permissions_instructions": False, "include_environment_context": False,
        "include_apps_instructions": False, "project_doc_max_bytes": 0, "check_for_update_on_startup": False,
        "tool_output_token_limit": max(limits.max_output_chars // 4, 64),
        "features.multi_agent": False, "features.goals": False, "features.shell_snapshot": False,
        "features.apps": False, "agents.enabled": False, "skills.include_instructions": False,
        "skills.bundled.enabled": False, "history.persistence": "none", "analytics.enabled": False,
        "feedback.enabled": False,
    }
    if prompt:
        cfg["model_instructions_file"] = f"{RELAY_MOUNT}/{PROMPT_FILE}"
    return cfg


def toml_value(v: Any) -> str:
    """One TOML value (what `-c key=value` parses): JSON strings are valid TOML basic strings."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {type(v).__name__}")


class Codex:
    """Options: `context_window` (what Codex is told the model holds), `prompt` (None: Codex's own),
    `extra_args`, `binary` (the native `codex`, else the installed one)."""

    name: ClassVar[str] = "codex"

    def __init__(self, context_window: int = 32768, prompt: str | None = DEFAULT_PROMPT,
                 extra_args: list[str] | None = None, binary: str | None = None) -> None:
        self.context_window = context_window
        self.prompt = prompt
        self.extra_args = list(extra_args or [])
        self.binary = binary

    def args(self, instruction: str, endpoint: SessionEndpoint, limits: ScaffoldLimits, cwd: str) -> list[str]:
        a = ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-C", cwd]
        for k, v in codex_overrides(endpoint, limits, self.context_window, self.prompt is not None).items():
            a += ["-c", f"{k}={toml_value(v)}"]
        return [*a, *self.extra_args, "--", instruction]

    def environment(self, endpoint: SessionEndpoint) -> dict[str, str]:
        return {KEY_ENV: endpoint.api_key, "CODEX_HOME": STATE, "NO_COLOR": "1", "RUST_LOG": "error"}

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        binary = Path(self.binary) if self.binary else find_binary("codex")
        tree = binary.parents[1] if binary.parent.name == "bin" else None  # vendor/<triple>: rg, helpers
        cwd = getattr(getattr(sandbox, "task", None), "workdir", None) or "/app"
        args = self.args(instruction, endpoint, limits, cwd)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "codex-args.json").write_text(json.dumps(args[:-1], indent=1))  # the instruction is logged anyway
        run = await run_cli_in_sandbox(
            sandbox, binary, args, endpoint=endpoint, env=self.environment(endpoint), timeout=limits.timeout_sec,
            log_dir=log_dir, log_name="codex", files={PROMPT_FILE: self.prompt or ""}, stage_tree=tree,
            max_calls=limits.max_turns,
        )
        # Codex leaves helper links to absolute paths in CODEX_HOME/tmp; the trial's artifact download
        # refuses a tree holding such links, which would lose Codex's session files in /logs/agent.
        await sandbox.exec(f"rm -rf {STATE}/tmp/arg0*", timeout=30)
        return parse_events(run)


def parse_events(run: CliRun) -> ScaffoldResult:
    """The outcome from `codex exec --json` (one event per line: thread/turn/item events)."""
    events = run.events()
    items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
    meta: dict[str, Any] = {"returncode": run.exit_code, "relay_requests": run.relay_requests, "events": len(events),
                            "tool_uses": len(commands), "refused_calls": run.refused_calls}
    turns = run.relay_requests - run.refused_calls
    if run.timed_out:
        return ScaffoldResult("error", turns, "codex ran past its time limit and was killed", meta)
    if run.oom_killed:
        return ScaffoldResult("error", turns, f"codex {OOM_NOTE}", meta)
    if run.refused_calls:
        return ScaffoldResult("turn_limit", turns, None, meta)
    done = any(e.get("type") == "turn.completed" for e in events)
    if failed and all("max_output_tokens" in json.dumps(e) for e in failed):
        done = True  # the policy's last reply ran past max_tokens_per_call (Codex fails the turn): its fault
        meta["codex_errors"] = ["max_output_tokens"]
    elif failed or not done:
        last = failed[-1] if failed else None
        text = json.dumps(last)[-600:] if last else (run.stderr.strip() or run.stdout.strip())[-600:] or "no output"
        lowered = text.lower()
        if "context" in lowered and ("window" in lowered or "length" in lowered or "too long" in lowered):
            return ScaffoldResult("context_overflow", turns, None, meta)
        status: ExitStatus = "error"
        return ScaffoldResult(status, turns, f"codex failed (status {run.exit_code}): {text}", meta)
    return ScaffoldResult("finished", turns, None, meta)
