"""legorl's own coding agent: a short tool-calling loop over the official `openai` client.

Each turn the model either
- calls tools natively (`bash`, `view`, `create`, `str_replace`, `submit`; with templates lacking
  tool support the proxy turns hermes `<tool_call>` JSON in the text into tool calls), or
- follows the text protocol: a reply holding a fenced ```bash block runs the whole (first) block as
  one command; a block that is just `submit` submits. Small models mostly answer this way.
Stop rules: `submit` -> "submitted"; a reply without any action that says it is done ("done",
"complete(d)", "finished", "solved") after at least one command ran -> "finished"; `max_turns` model
calls -> "turn_limit"; `max_no_action` replies in a row without an action -> "no_action_limit"
(each one is answered by a nudge that repeats the format); the proxy refusing a call for the
context window -> "context_overflow"; any other API error -> "error".
The conversation is only ever appended to (never rewritten), so the proxy keeps one exact branch.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, ClassVar

from legorl.agents.base import ScaffoldLimits, ScaffoldResult, SessionEndpoint
from legorl.agents.builtin_tools import (
    Action,
    example_messages,
    parse_arguments,
    run_action,
    says_done,
    text_action,
    tool_schemas,
)
from legorl.env.base import Sandbox

SYSTEM_PROMPT = """You are an expert Linux user. Solve the task by running shell commands.
Reply with exactly one bash code block per turn, for example:
```bash
ls -la
```
You will see its output. When the task is done, reply with:
```bash
submit
```"""

NUDGE = "No command found. Reply with one ```bash code block, or ```bash\nsubmit\n``` if the task is done."


def bash_block(command: str) -> str:
    """A text-protocol reply that runs `command` (or submits, for `submit`)."""
    return f"```bash\n{command}\n```"


def observation_message(obs: str) -> dict[str, str]:
    """How a command's output comes back to the model under the text protocol."""
    return {"role": "user", "content": f"Output:\n{obs}"}


def _is_overflow(exc: Exception) -> bool:
    code = getattr(exc, "code", None)
    text = str(exc).lower()
    return code == "context_length_exceeded" or "context length" in text or "context window" in text


class BuiltinScaffold:
    """See the module docstring. Options: `tools` (send tool schemas: True all, a list of names some,
    False the text protocol only), `system_prompt` (replace the default), `seed` (per-call seeds
    `seed + turn`, for reproducible runs), `examples` (few-shot conversations sent as real turns before
    the task: [task, reply] pairs, or messages with tool calls, see `example_messages`; small models copy
    a format from turns far better than from a description), `instruction_suffix` (appended to the task
    text, e.g. a one-line format reminder)."""

    name: ClassVar[str] = "builtin"
    needs_model: ClassVar[bool] = True

    def __init__(
        self,
        tools: bool | list[str] = True,
        system_prompt: str | None = None,
        seed: int | None = None,
        examples: list[list[Any]] | None = None,
        instruction_suffix: str = "",
    ):
        self.tools = tool_schemas(tools)
        self.system_prompt = system_prompt or SYSTEM_PROMPT
        self.seed = seed
        self.examples = [example_messages(e, i) for i, e in enumerate(examples or [])]
        self.instruction_suffix = instruction_suffix

    def first_messages(self, instruction: str) -> list[dict[str, Any]]:
        """The conversation the first model call sees: system prompt, few-shot examples, the task."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}]
        for example in self.examples:
            messages += [dict(m) for m in example]
        messages.append({"role": "user", "content": instruction.strip() + self.instruction_suffix})
        return messages

    async def demonstrate(self, instruction: str, commands: list[str], sandbox: Sandbox,
                          limits: ScaffoldLimits) -> list[dict[str, Any]]:
        """The conversation this scaffold would hold with a model that typed `commands`, one per turn, then
        submitted: each runs in `sandbox` and its real output comes back exactly as in a live trial (text
        protocol). Supervised warm starts train on these (`legorl.train.warmstart`)."""
        messages = self.first_messages(instruction)
        stats = {"commands": 0}
        for cmd in commands:
            messages.append({"role": "assistant", "content": bash_block(cmd)})
            messages.append(observation_message(await self._act(Action("bash", {"command": cmd}), sandbox,
                                                                limits, stats)))
        messages.append({"role": "assistant", "content": bash_block("submit")})
        return messages

    async def run(
        self, instruction: str, sandbox: Sandbox, endpoint: SessionEndpoint, limits: ScaffoldLimits, log_dir: Path
    ) -> ScaffoldResult:
        import openai

        log_dir.mkdir(parents=True, exist_ok=True)
        # a plain-http proxy needs no TLS: building the default client loads the CA bundle into a fresh SSL
        # context, ~0.2 s of the event loop per trial on a busy machine (seen in the loop-lag budget)
        plain = endpoint.openai_base_url.startswith("http://")
        client = openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0,
                                    timeout=limits.timeout_sec,
                                    http_client=openai.DefaultAsyncHttpxClient(verify=False) if plain else None)
        messages = self.first_messages(instruction)
        stats = {"commands": 0, "tool_calls": 0, "text_actions": 0, "nudges": 0}
        logf = (log_dir / "builtin.log").open("a")
        try:
            result = await self._loop(client, endpoint, sandbox, limits, messages, stats, logf)
        finally:
            logf.close()
            (log_dir / "messages.json").write_text(json.dumps(messages, indent=1, default=str))
            await client.close()
        result.metadata.update(stats)
        return result

    async def _loop(self, client: Any, endpoint: SessionEndpoint, sandbox: Sandbox, limits: ScaffoldLimits,
                    messages: list[dict[str, Any]], stats: dict[str, int], logf: Any) -> ScaffoldResult:
        import openai

        def note(kind: str, text: str) -> None:
            logf.write(f"[{time.strftime('%H:%M:%S')}] {kind}: {text}\n")
            logf.flush()

        no_action = 0
        for turn in range(1, limits.max_turns + 1):
            kwargs: dict[str, Any] = {"model": endpoint.model, "messages": messages,
                                      "max_tokens": limits.max_tokens_per_call,
                                      "temperature": limits.temperature, "top_p": limits.top_p}
            if self.tools:
                kwargs["tools"] = self.tools
            if self.seed is not None:
                kwargs["seed"] = self.seed + turn
            try:
                resp = await client.chat.completions.create(**kwargs)
            except openai.APIStatusError as exc:
                note("api error", str(exc))
                if _is_overflow(exc):
                    return ScaffoldResult("context_overflow", turn - 1, str(exc)[:500])
                return ScaffoldResult("error", turn - 1, f"HTTP {exc.status_code}: {str(exc)[:500]}")
            except openai.APIError as exc:
                note("api error", str(exc))
                return ScaffoldResult("error", turn - 1, f"{type(exc).__name__}: {str(exc)[:500]}")
            msg = resp.choices[0].message
            content = msg.content or ""
            note(f"turn {turn} model", content + "".join(
                f"\n<call {c.function.name} {c.function.arguments}>" for c in msg.tool_calls or []))
            assistant: dict[str, Any] = {"role": "assistant", "content": content}
            if msg.tool_calls:
                assistant["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in msg.tool_calls
                ]
            messages.append(assistant)
            if msg.tool_calls:
                no_action = 0
                for c in msg.tool_calls:
                    stats["tool_calls"] += 1
                    try:
                        action = Action(c.function.name, parse_arguments(c.function.arguments), c.id)
                    except ValueError as exc:
                        obs = f"error: could not read the arguments: {exc}"
                    else:
                        if action.tool == "submit":
                            return ScaffoldResult("submitted", turn)
                        obs = await self._act(action, sandbox, limits, stats)
                    note("observation", obs)
                    messages.append({"role": "tool", "tool_call_id": c.id, "content": obs})
                continue
            action = text_action(content)
            if action is not None:
                no_action = 0
                stats["text_actions"] += 1
                if action.tool == "submit":
                    return ScaffoldResult("submitted", turn)
                obs = await self._act(action, sandbox, limits, stats)
                note("observation", obs)
                messages.append(observation_message(obs))
                continue
            if stats["commands"] and says_done(content):
                return ScaffoldResult("finished", turn)
            no_action += 1
            if no_action >= limits.max_no_action:
                return ScaffoldResult("no_action_limit", turn)
            stats["nudges"] += 1
            messages.append({"role": "user", "content": NUDGE})
        return ScaffoldResult("turn_limit", limits.max_turns)

    @staticmethod
    async def _act(action: Action, sandbox: Sandbox, limits: ScaffoldLimits, stats: dict[str, int]) -> str:
        stats["commands"] += 1
        return await run_action(action, sandbox, limits.command_timeout_sec, limits.max_output_chars)
