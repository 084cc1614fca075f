"""Scoring a finished trial the way Harbor does, with every failure named (never a silent 0).

`bash /tests/test.sh` runs from the workdir and writes /logs/verifier/reward.json (a dict of floats,
wins) or reward.txt (one float). The scalar reward is `rewards["reward"]` if present, else the only
value, else the mean of all values. test.sh's exit code does not matter when a reward was written
(failing pytest exits non-zero by design); a timeout, a crash without reward, or a missing or garbled
reward file is `verifier_error` with the reason.

The verdict belongs to the verifier: a reward test.sh wrote stands, unless there is hard evidence
that test.sh itself could not run (`verdict_override`): a command that test.sh, or a script of its own
under /tests, calls by name is not installed (bash's `/tests/test.sh: line N: jq: command not found`, or
`python3: No module named pytest` for `python3 -m pytest`), and the task's instruction does not ask the
agent to provide that command or module. Everything else a verifier
prints is an answer: a redirect or `cat` of a file the agent never wrote, Permission denied on a script
it should have made executable, `bash /app/run.sh` exiting 127 because the script is missing, the code
under test raising FileNotFoundError, pytest failing, an installer that failed without network before
the runner ran anyway. A timeout, no reward file, or a garbled one is `verifier_error` whatever was
printed. Only a `verifier_error` leaves training data (the trajectory filter drops it): guessing
"infrastructure" from a failing answer's stderr would drop exactly the trials a policy should be
penalised for, so the rule needs evidence, not a resemblance.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from legorl.env import guards
from legorl.env.base import ExecResult, Sandbox
from legorl.env.output import tail
from legorl.env.phases import enter_phase
from legorl.tasks.model import Task

Outcome = Literal["ok", "verifier_error"]

_READ_REWARDS = (
    "for f in reward.json reward.txt; do p=/logs/verifier/$f; "
    'if [ -f "$p" ]; then printf "%s " $f; head -c 1048576 "$p" | base64 -w0; echo; fi; done'
)


@dataclass
class VerifyResult:
    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    outcome: Outcome = "ok"
    reason: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    exit_code: int | None = None
    flags: list[str] = field(default_factory=list)  # anti-hacking findings (see guards)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def tampered(self) -> bool:
        return bool(self.flags)


def parse_rewards(json_text: str | None, txt_text: str | None) -> tuple[float, dict[str, float]]:
    """(scalar, all rewards) from the two files' contents; ValueError says what is wrong."""
    if json_text is not None:
        try:
            data: Any = json.loads(json_text)
        except json.JSONDecodeError as e:
            raise ValueError(f"reward.json is not JSON: {e}") from e
        if isinstance(data, bool) or not isinstance(data, int | float | dict):
            raise ValueError(f"reward.json must be an object of numbers, got {type(data).__name__}")
        if not isinstance(data, dict):
            data = {"reward": data}
        if not data:
            raise ValueError("reward.json is an empty object")
        rewards: dict[str, float] = {}
        for k, v in data.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"reward.json: {k!r} is {v!r}, not a finite number")
            rewards[str(k)] = float(v)
        if "reward" in rewards:
            return rewards["reward"], rewards
        return sum(rewards.values()) / len(rewards), rewards
    if txt_text is not None:
        s = txt_text.strip()
        try:
            val = float(s)
        except ValueError:
            raise ValueError(f"reward.txt is not a number: {s[:80]!r}") from None
        if not math.isfinite(val):
            raise ValueError(f"reward.txt is {s!r}")
        return val, {"reward": val}
    raise ValueError("no reward file written (/logs/verifier/reward.json or reward.txt)")


# A command looked up by name (no slash) from a line of test.sh or of another script under /tests: bash
# prints this only when the name is on no PATH directory, i.e. the verifier's environment lacks a tool.
_MISSING_COMMAND = re.compile(r"^(/tests/\S+): line \d+: ([^\s/:]+): command not found\s*$", re.MULTILINE)
# `python3 -m pytest` without pytest: the interpreter itself says so (the code under test importing a missing
# module raises `ModuleNotFoundError: No module named 'x'` instead, with quotes: an answer).
_MISSING_RUNNER = re.compile(r"^(?:\S*/)?(python[\d.]*): No module named ([\w.]+)\s*$", re.MULTILINE)


def infra_failure(stdout: str, stderr: str, instruction: str = "") -> str | None:
    """The line that proves test.sh could not run as written (a command it calls is not installed), or
    None. A missing command the instruction names (``install cowsay``) is the agent's to provide: an answer."""
    named = set(re.findall(r"[\w+-]+(?:\.[\w+-]+)*", instruction))  # words, `python3.11`, no trailing dot
    for text in (stderr, stdout):
        for pattern in (_MISSING_COMMAND, _MISSING_RUNNER):
            for m in pattern.finditer(text):
                if m.group(2) not in named:
                    return m.group(0).strip()[:300]
    return None


def verdict_override(reward: float | None, stdout: str, stderr: str, instruction: str = "") -> str | None:
    """Why a written `reward` must not be trained on, or None when it stands. A full reward always stands
    (the verifier found what it checks for, e.g. through a fallback); a lower one stands unless
    `infra_failure` has evidence."""
    if reward is None or reward >= 1.0:
        return None
    return infra_failure(stdout, stderr, instruction)


async def _mount(sandbox: Sandbox, src: Path, at: str, method: str) -> None:
    mount = getattr(sandbox, method, None)
    if mount is not None:
        await mount(src)
    else:
        await sandbox.upload(src, at)


async def verify(
    sandbox: Sandbox, task: Task, timeout: float | None = None, guard: bool = True
) -> VerifyResult:
    """Runs the task's tests in the trial's sandbox after the agent finished; returns a typed result."""
    t0 = time.monotonic()
    flags: list[str] = []
    # The agent's processes (a server it left for test.sh) live through the verifier where the backend
    # fences the verifier's paths off from them (local: legorl.env.localphase); elsewhere (docker,
    # kubernetes: one container, one uid) a live leftover could rewrite the reward after test.sh, so
    # they are stopped first, as before.
    quiesce = getattr(sandbox, "quiesce", None)
    keep = bool(getattr(sandbox, "keeps_agent_processes", False))
    if quiesce is not None and not keep:
        await quiesce()
    if guard:
        flags += (await guards.before_verification(sandbox)).flags
    else:
        await sandbox.exec("rm -f /logs/verifier/reward.txt /logs/verifier/reward.json", cwd="/", timeout=30)
    if not (task.tests_dir / "test.sh").is_file():
        return VerifyResult(
            None,
            outcome="verifier_error",
            reason=f"{task.tests_dir}/test.sh not found",
            flags=flags,
            duration_s=time.monotonic() - t0,
        )
    await _mount(sandbox, task.tests_dir, guards.TESTS_DIR, "mount_tests")
    expected = guards.hash_host_tree(task.tests_dir) if guard else {}
    if guard:
        flags += guards.compare(
            expected, await guards.hash_tree(sandbox, guards.TESTS_DIR), "/tests at mount"
        )
    limit = task.verifier_timeout_sec if timeout is None else timeout
    await enter_phase(sandbox, "verifier")  # the verifier's network and user
    # from the workdir, as Harbor; [verifier].env (and [verifier.environment].env) for test.sh only
    run = await sandbox.exec("bash /tests/test.sh", timeout=limit, env=dict(task.verifier_env) or None)
    if quiesce is not None and keep:
        await quiesce()  # the verifier is done with them: nothing of the agent runs while the reward is read
    res = VerifyResult(
        reward=None,
        stdout_tail=tail(run.stdout),
        stderr_tail=tail(run.stderr),
        exit_code=run.exit_code,
    )
    # one exec for the after-run checks: the tests' hashes and the reward files
    after = await guards.exec_parts(sandbox, {"tests": guards.hash_cmd(guards.TESTS_DIR) if guard else "true",
                                              "rewards": _READ_REWARDS})
    if guard:
        flags += guards.compare(expected, guards.parse_hash(*after["tests"]), "/tests after run")
    res.flags = flags
    await _hide(sandbox, guards.TESTS_DIR)  # a trial that goes on afterwards must not see them
    if run.timed_out:
        res.outcome, res.reason = "verifier_error", f"verifier timed out after {limit:.0f}s"
    else:
        files = _parse_rewards_listing(after["rewards"][0])
        try:
            res.reward, res.rewards = parse_rewards(files.get("reward.json"), files.get("reward.txt"))
        except ValueError as e:
            res.outcome = "verifier_error"
            res.reason = f"{e} (test.sh exit code {run.exit_code}{', OOM' if run.oom_killed else ''})"
            if run.stderr.strip():
                res.reason += f"; stderr: {tail(run.stderr, 300).strip()}"
        infra = verdict_override(res.reward if res.ok else None, run.stdout, run.stderr, task.instruction)
        if infra:
            res.outcome = "verifier_error"
            res.reason = (f"verifier could not run (a command test.sh calls is not installed): {infra}; "
                          f"reward {res.reward} discarded; stderr: {tail(run.stderr, 300).strip()}")
            res.reward = None
    res.duration_s = time.monotonic() - t0
    return res


def _parse_rewards_listing(stdout: str) -> dict[str, str]:
    """reward.json / reward.txt contents from `_READ_REWARDS`'s output (one `name base64` line each)."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        name, _, b64 = line.partition(" ")
        if name in ("reward.json", "reward.txt"):
            try:
                out[name] = base64.b64decode(b64).decode("utf-8", errors="replace")
            except ValueError:
                out[name] = ""
    return out


async def run_oracle(sandbox: Sandbox, task: Task, timeout: float | None = None) -> ExecResult:
    """Runs the reference solution (solution/solve.sh at /solution) as the agent would, then hides it."""
    if not task.has_solution:
        raise FileNotFoundError(f"{task.solution_dir}/solve.sh not found")
    await _mount(sandbox, task.solution_dir, "/solution", "mount_solution")
    limit = task.agent_timeout_sec if timeout is None else timeout
    await enter_phase(sandbox, "solution")
    try:
        return await sandbox.exec("bash /solution/solve.sh", timeout=limit, env=dict(task.solution_env) or None)
    finally:
        await _hide(sandbox, "/solution")


async def _hide(sandbox: Sandbox, at: str) -> None:
    unmount = getattr(sandbox, "unmount", None)
    if unmount is not None:
        await unmount(at)
    else:
        await sandbox.exec(f"rm -rf {at}", cwd="/", timeout=30)
