"""AgentLoopWorker: one trial = sandbox -> proxy session -> scaffold -> verifier -> TrialResult.

Outcome rules (first match wins):
- the sandbox does not start (or times out starting)            -> env_setup_failed (nothing else runs)
- the verifier times out, crashes or writes no usable reward     -> verifier_error (reward None)
- the scaffold ran past the agent timeout                        -> timeout
- the proxy refused a call for the context window / the scaffold said so -> context_overflow
- the scaffold raised, or ended with exit status "error"         -> agent_error
- the session's tokens cannot be trained on (policy token without logprob) -> agent_error, no rollout
- otherwise reward >= 1 -> solved, else failed.
After a timeout, overflow or scaffold crash the trial is still verified (as Harbor does) and the
reward is kept next to the non-solved outcome, so eval can report it and the filter can decide.
Tokens generated before a crash or timeout are kept: the session is closed in a `finally`, and the
sandbox is stopped in a `finally` (which kills whatever the scaffold left running in it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from legorl.agents.base import Scaffold, ScaffoldLimits, ScaffoldResult, load_scaffold
from legorl.env import SandboxError, make_sandbox, phases, separate, verify
from legorl.env.base import Sandbox
from legorl.env.verifier import VerifyResult
from legorl.proxy.record import SessionRecord
from legorl.trial import Outcome, TrialResult, TrialSpec
from legorl.workers.artifacts import TrialDir, slug, write_result
from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import EndpointProvider
from legorl.workers.harness import choose_harness
from legorl.workers.tokens import TokensError, trial_tokens

log = logging.getLogger(__name__)
OnResult = Callable[[TrialResult], Awaitable[None] | None]


def with_trial_id(spec: TrialSpec) -> TrialSpec:
    """`spec` with a trial id (kept if it has one): `<task slug>.a<attempt>.<random>`."""
    if spec.trial_id:
        return spec
    return dataclasses.replace(spec, trial_id=f"{slug(spec.task.id, 40)}.a{spec.attempt}.{uuid.uuid4().hex[:8]}")


async def run_each(specs: Sequence[TrialSpec], run: Callable[[TrialSpec], Awaitable[TrialResult]],
                   on_result: OnResult | None = None) -> list[TrialResult]:
    """`run` every spec concurrently; results in input order, `on_result` as each one ends."""

    async def one(spec: TrialSpec) -> TrialResult:
        res = await run(spec)
        if on_result is not None:
            ret = on_result(res)
            if asyncio.iscoroutine(ret):
                await ret
        return res

    return list(await asyncio.gather(*(one(s) for s in specs)))


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _with_tail(exc: BaseException, n: int = 800) -> str:
    """First line and the end of a multi-line error (a failed build's line and its output's tail), as one
    line (" | " between the lines): a trial's reason is one line in results, logs and the dashboard."""
    lines = str(exc).strip().splitlines()
    rest = " | ".join(x.strip() for x in lines[1:] if x.strip())
    return _short(exc) + (f" | {rest[-n:]}" if rest else "")


class AgentLoopWorker:
    """Runs trials concurrently in one asyncio loop; no Ray, no globals (wrap it in an actor later)."""

    def __init__(self, config: WorkerConfig, endpoints: EndpointProvider,
                 make_sandbox_fn: Callable[..., Sandbox] = make_sandbox):
        self.config = config
        self.endpoints = endpoints
        self._make_sandbox = make_sandbox_fn
        self._trials = asyncio.Semaphore(config.max_trials)
        self._sandboxes = asyncio.Semaphore(config.max_sandboxes)
        self._scaffolds = asyncio.Semaphore(config.max_scaffolds)

    # -- many trials ---------------------------------------------------------------------------
    async def run_trials(self, specs: Sequence[TrialSpec], on_result: OnResult | None = None) -> list[TrialResult]:
        """All trials, at most `max_trials` at once; results in input order; `on_result` per finished one."""

        return await run_each(specs, self.run_trial, on_result)

    # -- one trial -----------------------------------------------------------------------------
    async def run_trial(self, spec: TrialSpec) -> TrialResult:
        spec = with_trial_id(spec)
        async with self._trials:
            return await _Trial(self, spec).run()


def with_memory_floor(task: Any, floor_mb: int | None) -> Any:
    """`task` with its memory limit raised to `floor_mb` (`sandbox.min_memory_mb`) when lower; else `task`."""
    if not floor_mb or task.limits.memory_mb >= floor_mb:
        return task
    return dataclasses.replace(task, limits=dataclasses.replace(task.limits, memory_mb=floor_mb))


class _Trial:
    """The state of one trial while it runs (kept out of the worker so trials never share it)."""

    def __init__(self, worker: AgentLoopWorker, spec: TrialSpec):
        self.w, self.spec, self.cfg = worker, spec, worker.config
        self.task = with_memory_floor(spec.task, self.cfg.min_memory_mb)
        self.timings: dict[str, float] = {}
        self.meta: dict[str, Any] = {}
        self.agent_outcome: Outcome | None = None
        self.agent_reason = ""
        self.sres: ScaffoldResult | None = None
        self.record: SessionRecord | None = None
        self.vres: VerifyResult | None = None

    def _timed(self, name: str, t0: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - t0

    async def run(self) -> TrialResult:
        t_start = time.monotonic()
        tdir = TrialDir(self.cfg.output_root, self.cfg.exp_name, self.spec.step, self.spec.trial_id)
        try:
            async with self.w._sandboxes:
                sandbox = await self._start_sandbox()
                if sandbox is None:
                    result = self._result(tdir, t_start)
                else:
                    try:
                        await self._agent_phase(sandbox, tdir)
                        await self._verify_phase(sandbox, tdir)
                        await self._collect(sandbox, tdir)
                    finally:
                        await self._stop(sandbox)
                    result = self._result(tdir, t_start)
            if tdir.persistent:
                write_result(tdir.path / "result.json", result)
            return result
        finally:
            tdir.cleanup()

    def _new_sandbox(self, task: Any) -> Sandbox:
        return self.w._make_sandbox(task, backend=self.cfg.backend, **self.cfg.sandbox_opts)

    async def _start_sandbox(self) -> Sandbox | None:
        t0 = time.monotonic()
        limit = self.cfg.setup_timeout_sec or self.task.build_timeout_sec
        sandbox: Sandbox | None = None
        try:
            sandbox = self.w._make_sandbox(self.task, backend=self.cfg.backend, **self.cfg.sandbox_opts)
            await asyncio.wait_for(sandbox.start(), limit)
            if self.task.healthcheck is not None:  # Harbor: healthy before the agent starts
                self.meta["healthcheck_attempts"] = await phases.healthcheck(sandbox, self.task)
            await phases.enter_phase(sandbox, "agent")
            return sandbox
        except (Exception, TimeoutError) as exc:
            why = f"sandbox start timed out after {limit:.0f}s" if isinstance(exc, TimeoutError) else _with_tail(exc)
            self.agent_outcome, self.agent_reason = "env_setup_failed", why
            if sandbox is not None:
                await self._stop(sandbox)
            return None
        finally:
            self._timed("sandbox_start", t0)

    async def _collect(self, sandbox: Sandbox, tdir: TrialDir) -> None:
        """/logs/* and the task's artifacts into the trial dir; what the backend approximated into meta."""
        describe = getattr(sandbox, "describe", None)
        notes = list(describe().get("notes") or []) if describe else []
        usage = getattr(sandbox, "usage_mb", None)
        if usage is not None:
            self.meta["disk_mb"] = await asyncio.to_thread(usage)
            storage = await asyncio.to_thread(sandbox.storage_note)  # type: ignore[attr-defined]
            notes += [storage] if storage else []
        if notes:
            self.meta["environment_notes"] = notes
        if not tdir.persistent:
            return
        try:
            missing = await phases.collect(sandbox, self.task, tdir.path)
        except Exception as exc:  # collecting never changes the trial's outcome
            missing = [_short(exc)]
        if missing:
            self.meta["artifacts_missing"] = missing

    async def _stop(self, sandbox: Sandbox) -> None:
        t0 = time.monotonic()
        try:
            await asyncio.shield(asyncio.wait_for(sandbox.stop(), 60))
        except (Exception, TimeoutError) as exc:  # a stop failure must not hide the trial's result
            log.warning("trial %s: sandbox stop failed: %s", self.spec.trial_id, _short(exc))
            self.meta["sandbox_stop_error"] = _short(exc)
        self._timed("sandbox_stop", t0)

    def _limits(self) -> tuple[float, ScaffoldLimits]:
        timeout = self.cfg.agent_timeout_sec or self.task.agent_timeout_sec
        return timeout, dataclasses.replace(self.cfg.limits, timeout_sec=timeout)

    async def _agent_phase(self, sandbox: Sandbox, tdir: TrialDir) -> None:
        timeout, limits = self._limits()
        meta: dict[str, Any] = {"trial_id": self.spec.trial_id, "task_id": self.task.id, "attempt": self.spec.attempt}
        if self.cfg.pin_temperature:  # the proxy samples every call of the session at it (Session.temperature)
            meta["temperature"] = limits.temperature
        endpoint, handle = await self.w.endpoints.open(meta)
        t0 = time.monotonic()
        try:
            harness = choose_harness(self.cfg.harness_mix(), self.spec)
            self.meta["harness"] = harness.key
            scaffold: Scaffold = load_scaffold(harness.name, **harness.kwargs)
            async with self.w._scaffolds:
                t0 = time.monotonic()
                cm = asyncio.timeout(timeout)
                try:
                    async with cm:
                        self.sres = await scaffold.run(self.task.instruction, sandbox, endpoint, limits, tdir.agent)
                except TimeoutError:
                    if not cm.expired():
                        raise
                if cm.expired():  # also when the scaffold swallowed the cancellation and returned
                    self.agent_outcome = "timeout"
                    self.agent_reason = f"agent ran past its {timeout:.0f}s timeout"
        except Exception as exc:
            self.agent_outcome, self.agent_reason = "agent_error", f"scaffold crashed: {_short(exc)}"
            (tdir.agent / "error.txt").write_text("".join(traceback.format_exception(exc)))
        finally:
            self._timed("agent", t0)
            t1 = time.monotonic()
            try:
                self.record = await self.w.endpoints.close(handle, tdir.out)
            except Exception as exc:
                self.meta["session_close_error"] = _short(exc)
            self._timed("session_close", t1)
        self._classify_agent()

    def _classify_agent(self) -> None:
        if self.sres is not None:
            self.meta["exit_status"] = self.sres.exit_status
            self.meta.update({f"scaffold_{k}": v for k, v in self.sres.metadata.items() if _jsonable(v)})
        if self.agent_outcome is not None:
            return
        overflow = bool(self.record is not None and self.record.context_overflow)
        if overflow or (self.sres is not None and self.sres.exit_status == "context_overflow"):
            self.agent_outcome = "context_overflow"
            self.agent_reason = "the conversation outgrew the model's context window"
        elif self.sres is not None and self.sres.exit_status == "error":
            self.agent_outcome = "agent_error"
            self.agent_reason = f"scaffold error: {self.sres.error or 'unspecified'}"

    async def _verify_phase(self, sandbox: Sandbox, tdir: TrialDir) -> None:
        t0 = time.monotonic()
        limit = self.cfg.verifier_timeout_sec or self.task.verifier_timeout_sec
        hard = limit + self.cfg.grace_sec
        if self.task.verifier_separate:  # a fresh environment holding only the artifacts (legorl.env.separate)
            check = separate.verify_separate(sandbox, self.task, self._new_sandbox, timeout=limit)
            hard += self.cfg.setup_timeout_sec or self.task.build_timeout_sec
        else:
            check = verify(sandbox, self.task, timeout=limit)
        try:
            self.vres = await asyncio.wait_for(check, hard)
        except TimeoutError:
            self.vres = VerifyResult(None, outcome="verifier_error", reason=f"verifier hung past {limit:.0f}s")
        except (Exception, SandboxError) as exc:
            self.vres = VerifyResult(None, outcome="verifier_error", reason=f"verifier crashed: {_short(exc)}")
        self._timed("verify", t0)
        v = self.vres
        tdir.write_text(
            "verifier.log",
            f"outcome: {v.outcome}\nreward: {v.reward}\nrewards: {v.rewards}\nexit_code: {v.exit_code}\n"
            f"reason: {v.reason}\nflags: {v.flags}\n--- stdout (tail)\n{v.stdout_tail}\n"
            f"--- stderr (tail)\n{v.stderr_tail}\n",
        )

    def _result(self, tdir: TrialDir, t_start: float) -> TrialResult:
        outcome, reason, reward = self._outcome()
        tokens = None
        try:
            tokens = trial_tokens(self.record)
        except TokensError as exc:
            outcome, reason = "agent_error", f"unusable tokens: {exc}"
        turns = self.sres.turns if self.sres else (self.record.counters.calls if self.record else 0)
        duration = time.monotonic() - t_start
        self.timings["total"] = duration
        if self.record is not None:
            self.meta["counters"] = dataclasses.asdict(self.record.counters)
        return TrialResult(
            spec=self.spec, outcome=outcome, reason=reason, reward=reward, tokens=tokens, turns=turns,
            duration_s=duration, artifacts_dir=str(tdir.path) if tdir.persistent else None,
            timings=dict(self.timings), metadata=self.meta,
        )

    def _outcome(self) -> tuple[Outcome, str, float | None]:
        if self.agent_outcome == "env_setup_failed":
            return "env_setup_failed", self.agent_reason, None
        v = self.vres
        if v is None or not v.ok or v.reward is None:
            why = v.reason if v is not None else "not verified"
            if self.agent_outcome:
                why += f" (after {self.agent_outcome}: {self.agent_reason})"
            return "verifier_error", why, None
        reward = float(v.reward)
        self.meta["rewards"] = dict(v.rewards)
        if v.flags:
            self.meta["verifier_flags"] = list(v.flags)
            if self.cfg.zero_reward_on_tamper and reward != 0.0:
                self.meta["reward_before_guard"] = reward
                reward = 0.0
        if self.agent_outcome is not None:
            return self.agent_outcome, self.agent_reason, reward
        if v.flags:
            return "failed", f"verifier guard flagged the trial: {'; '.join(v.flags)[:300]}", reward
        return ("solved" if reward >= 1.0 else "failed"), "", reward


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None) | list | dict)


async def run_trials(
    specs: Sequence[TrialSpec],
    endpoints: EndpointProvider,
    config: WorkerConfig | None = None,
    on_result: OnResult | None = None,
) -> list[TrialResult]:
    """Convenience: one worker, all `specs`, results in input order (`on_result` for progress bars)."""
    worker = AgentLoopWorker(config or WorkerConfig(), endpoints)
    return await worker.run_trials(specs, on_result)
