"""`legorl doctor RUN_DIR`: names known failure signatures in a run's logs and trials, with the fix.

Each signature is a function `(RunData) -> Finding | None`, built to fire on the symptom the way it
shows up in the step JSONL and result.json files, not on the cause (the cause is what `fix` names).
"""

from __future__ import annotations

import statistics
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from legorl.ops.runs import Run

# Thresholds: past these a run is wasting compute, not just noisy.
ABS_DIFF_BAD = 0.1  # mean |logprob_rollout - logprob_trainer| (fp32 embedded: ~1e-5; bf16 vLLM: ~1e-2)
PEARSON_BAD = 0.9
ESS_BAD = 0.3  # effective sample size fraction of the IS weights
STALE_DOMINATES = 0.5  # fraction of a step's trials dropped as too stale
ZERO_STD_DOMINATES = 0.8  # fraction of GRPO groups with identical rewards
LATENCY_GROWTH = 3.0  # late-step sandbox start vs early-step, and at least LATENCY_MIN_S
LATENCY_MIN_S = 2.0
OUTCOME_DOMINATES = 0.5  # fraction of a step's trials ending in timeout / context_overflow / agent_error
LENGTH_CAPPED_DOMINATES = 0.5  # fraction of model calls stopped at rollout.max_response_len, over the last steps
# calls evicted from a full KV pool per trial over the last steps: each recomputes its context, so on
# multi-turn trials of ~500 tokens one eviction in ten trials is ~10% more prefill
PREEMPTIONS_PER_TRIAL_BAD = 0.1


@dataclass
class Finding:
    signature: str
    evidence: str
    fix: str

    def lines(self) -> list[str]:
        return [f"✗ {self.signature}: {self.evidence}", f"  fix: {self.fix}"]


@dataclass
class RunData:
    config: dict[str, Any]
    records: list[dict[str, Any]]  # training steps only (step > 0)
    trials: list[dict[str, Any]]  # training trials only (no val_*)
    by_step: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, run: Run) -> RunData:
        records = [r for r in run.metrics() if isinstance(r.get("step"), int) and r["step"] > 0]
        trials = [t for t in run.trials() if not str(t.get("trial_id", "")).startswith("val_")]
        by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for t in trials:
            by_step[int(t.get("step", 0))].append(t)
        return cls(current_layout(run.config), records, trials, dict(sorted(by_step.items())))

    def series(self, key: str) -> list[tuple[int, float]]:
        return [(r["step"], float(r[key])) for r in self.records if isinstance(r.get(key), int | float)]


def current_layout(config: dict[str, Any]) -> dict[str, Any]:
    """A run's config.json in the current section layout: a run dir written by an older legorl has
    the flat keys of `legorl.config.loading.MOVED_KEYS`, read here under their new names."""
    from legorl.config.loading import ConfigError, ConfigKeyMoved, migrate_keys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigKeyMoved)
        try:
            return migrate_keys(config, "config.json")
        except ConfigError:  # a value no layout accepts: read what is there
            return config


def _counters(t: dict[str, Any]) -> dict[str, Any]:
    return (t.get("metadata") or {}).get("counters") or {}


def zero_tool_calls(d: RunData) -> Finding | None:
    from legorl.ops.preflight_model import scaffold_tool_mode

    a = d.config.get("agent") or {}
    if scaffold_tool_mode(a.get("name", "builtin"), a.get("kwargs") or {}) != "tools":
        return None
    for step, trials in d.by_step.items():
        called = [t for t in trials if _counters(t).get("calls", 0) > 0]
        if called and all(_counters(t).get("tool_calls", 0) == 0 for t in called):
            failures = sum(_counters(t).get("tool_parse_failures", 0) for t in called)
            # a scaffold with a text fallback (builtin) still acts: then it is the policy, not the parser
            acted = sum((t.get("metadata") or {}).get("scaffold_commands", 0) or 0 for t in called)
            if not failures and acted:
                continue
            return Finding(
                "zero tool calls",
                f"step {step}: {len(called)} trials called the model, none made a tool call "
                f"({failures} call-shaped blocks failed to parse); scaffold {a.get('name', 'builtin')!r} uses tools",
                f"the tool parser ({a.get('tool_parser', 'hermes')!r}) does not match what the model writes: "
                "run `legorl preflight` and set agent.tool_parser to the chat template's format",
            )
    return None


def zero_rewards_verifier_errors(d: RunData) -> Finding | None:
    for step, trials in d.by_step.items():
        errs = [t for t in trials if t.get("outcome") == "verifier_error"]
        if errs and all(not t.get("reward") for t in trials):
            reason = errs[0].get("reason") or "see verifier.log"
            return Finding(
                "all-zero rewards with verifier errors",
                f"step {step}: every reward is 0 and {len(errs)}/{len(trials)} trials are verifier_error "
                f"(first: {reason})",
                "the verifier cannot run in the sandbox (missing tools, wrong paths, timeout): run "
                "`legorl tasks check` and the oracle scaffold on one task, read the trial's verifier.log",
            )
    return None


def verifier_errors_share(d: RunData) -> Finding | None:
    """A step where more than `rollout.verifier_error_warn_share` of the trials could not be judged: they
    leave training, so what is left over-represents the trials the verifier could score."""
    limit = float((d.config.get("rollout") or {}).get("verifier_error_warn_share", 0.2))
    for step, trials in d.by_step.items():
        errs = [t for t in trials if t.get("outcome") == "verifier_error"]
        if all(not t.get("reward") for t in trials):
            continue  # `zero_rewards_verifier_errors` names that step
        if len(errs) / len(trials) > limit:
            reasons = Counter(str(t.get("reason") or "see verifier.log")[:160] for t in errs)
            reason, n = reasons.most_common(1)[0]
            return Finding(
                "verifier errors drop trials from training",
                f"step {step}: {len(errs)}/{len(trials)} trials are verifier_error (over {limit:g}); "
                f"most common ({n}): {reason}",
                "the verifier cannot judge these trials (a tool test.sh calls is missing, no reward file, a "
                "timeout): run the oracle on one task (`legorl eval TASKS --agent oracle -k 1`), read its "
                "verifier.log, install what test.sh needs or fix the task",
            )
    return None


def all_env_setup_failed(d: RunData) -> Finding | None:
    for step, trials in d.by_step.items():
        if trials and all(t.get("outcome") == "env_setup_failed" for t in trials):
            reason = trials[0].get("reason") or "?"
            return Finding(
                "every trial env_setup_failed",
                f"step {step}: {len(trials)}/{len(trials)} trials could not start their sandbox ({reason})",
                "the sandbox backend is broken on this host: run `legorl preflight CONFIG` (sandbox check), "
                "check bubblewrap/podman, disk space and the task's environment/",
            )
    return None


def logprob_collapse(d: RunData) -> Finding | None:
    diffs = {s: v for s, v in d.series("rollout_corr/abs_diff_mean")}
    pears = {s: v for s, v in d.series("rollout_corr/pearson")}
    bad = [s for s in sorted(set(diffs) | set(pears))
           if diffs.get(s, 0.0) > ABS_DIFF_BAD or pears.get(s, 1.0) < PEARSON_BAD]
    if not bad:
        return None
    s = bad[0]
    return Finding(
        "rollout/trainer logprob agreement collapse",
        f"from step {s} ({len(bad)} step(s)): abs_diff_mean={diffs.get(s, float('nan')):.3g}, "
        f"pearson={pears.get(s, float('nan')):.3g}",
        "sampler and trainer disagree on the policy: check weight sync (weight versions), dtype (bf16 vs fp32), "
        "R3 on MoE models, the sampling temperature passed to the trainer; set trainer.max_logprob_abs_diff "
        "to stop such batches",
    )


def staleness_drops(d: RunData) -> Finding | None:
    for r in d.records:
        stale = sum(float(v) for k, v in r.items() if "stale" in k and "drop" in k and isinstance(v, int | float))
        kept = r.get("trajectory_filter/kept")
        total = stale + (float(kept) if isinstance(kept, int | float) else 0.0)
        if total > 0 and stale / total > STALE_DOMINATES:
            return Finding(
                "staleness drops dominate",
                f"step {r['step']}: {stale:.0f} of {total:.0f} rollouts dropped as too stale",
                "rollouts finish more weight versions late than allowed: raise async_training.staleness_threshold "
                "(with algorithm.rollout_is='token'), or lower concurrency / max_turns so trials finish sooner",
            )
    return None


def ess_collapse(d: RunData) -> Finding | None:
    bad = [(s, v) for s, v in d.series("rollout_is/ess") if v < ESS_BAD]
    if not bad:
        return None
    s, v = bad[0]
    return Finding(
        "importance-sampling ESS collapse",
        f"step {s}: rollout_is/ess={v:.3g} ({len(bad)} step(s) below {ESS_BAD})",
        "a few tokens carry all the IS weight: sampler and trainer policies drifted apart (staleness, logprob "
        "mismatch) or sequence-level IS on long responses; prefer algorithm.rollout_is='token', lower "
        "rollout_is_threshold, reduce staleness",
    )


def sandbox_latency_creep(d: RunData) -> Finding | None:
    per_step = []
    for step, trials in d.by_step.items():
        starts = [float(t["timings"]["sandbox_start"]) for t in trials
                  if isinstance((t.get("timings") or {}).get("sandbox_start"), int | float)]
        if starts:
            per_step.append((step, statistics.median(starts)))
    if len(per_step) < 4:
        return None
    k = max(1, len(per_step) // 4)
    early = statistics.median(v for _, v in per_step[:k])
    late = statistics.median(v for _, v in per_step[-k:])
    if late > LATENCY_MIN_S and late > LATENCY_GROWTH * max(early, 1e-3):
        return Finding(
            "sandbox start latency creeping up",
            f"median sandbox_start {early:.2f}s in the first steps -> {late:.2f}s by step {per_step[-1][0]}",
            "sandboxes leak (processes, mounts, containers, disk): check that stop() runs, look for leftover "
            "bwrap/podman processes and /tmp growth; lower rollout.concurrency meanwhile",
        )
    return None


def zero_std_groups(d: RunData) -> Finding | None:
    rows = [(r["step"], float(r["grpo/zero_std_groups"]), float(r["grpo/num_groups"]), r.get("critic/score/mean"))
            for r in d.records if isinstance(r.get("grpo/zero_std_groups"), int | float)
            and isinstance(r.get("grpo/num_groups"), int | float) and r["grpo/num_groups"] > 0]
    recent = rows[-5:]
    if not recent:
        return None
    frac = sum(z for _, z, _, _ in recent) / sum(n for _, _, n, _ in recent)
    if frac < ZERO_STD_DOMINATES:
        return None
    scores = [float(s) for *_, s in recent if isinstance(s, int | float)]
    mean = statistics.mean(scores) if scores else None
    side = "too hard (all fail)" if mean is not None and mean < 0.5 else "too easy (all solve)"
    return Finding(
        "zero-std groups dominate",
        f"steps {recent[0][0]}..{recent[-1][0]}: {frac:.0%} of GRPO groups have identical rewards "
        f"(mean score {mean if mean is None else round(mean, 3)}): no gradient signal",
        f"the task pool is {side} for this policy: filter it by pass rate (legorl.tasks.filter), raise "
        "n_resp_per_prompt or temperature",
    )


def length_capped_calls(d: RunData) -> Finding | None:
    """Most model calls of the last steps ran to the length cap: the policy fills its turns (a block cut at the cap
    still runs, so a run of guesses in one block can pay), and every step's rollouts and update grow with it."""
    recent = d.series("rollout/turns/length_capped_share")[-3:]
    share = statistics.mean(v for _, v in recent) if len(recent) == 3 else 0.0
    if share < LENGTH_CAPPED_DOMINATES:
        return None
    rollout, algo = d.config.get("rollout") or {}, d.config.get("algorithm") or {}
    cap, buffer = rollout.get("max_response_len", "?"), algo.get("overlong_buffer") or 0
    fix = (f"penalise calls that reach the cap: algorithm.overlong_buffer (e.g. a third of {cap}) so they lose "
           "reward, or raise rollout.max_response_len if the replies are legitimately long"
           if not buffer else f"algorithm.overlong_buffer={buffer} is on: raise algorithm.overlong_penalty or the "
           "buffer, or raise rollout.max_response_len if the replies are legitimately long")
    return Finding("model calls cut at the length cap",
                   f"steps {recent[0][0]}..{recent[-1][0]}: {share:.0%} of model calls stopped at "
                   f"rollout.max_response_len={cap}", fix)


def kv_preemptions(d: RunData) -> Finding | None:
    """The engines' KV pools ran full in the last steps: each preempted call is evicted and later recomputes
    its whole context, so the rollout pays its prefill twice (`legorl preflight` can only bound this)."""
    recent = [r for r in d.records if isinstance(r.get("budget/engine/preemptions"), int | float)][-3:]
    trials = sum(float(r.get("trajectory_filter/kept", 0)) + float(r.get("trajectory_filter/dropped", 0))
                 for r in recent)
    preempted = sum(float(r["budget/engine/preemptions"]) for r in recent)
    if len(recent) < 3 or trials <= 0 or preempted / trials < PREEMPTIONS_PER_TRIAL_BAD:
        return None
    serving, rollout = d.config.get("serving") or {}, d.config.get("rollout") or {}
    pool, slots = serving.get("kv_budget_tokens", "?"), rollout.get("concurrency", "?")
    return Finding("KV pool preempts model calls",
                   f"steps {recent[0]['step']}..{recent[-1]['step']}: {preempted:.0f} calls evicted from a "
                   f"full KV pool over {trials:.0f} trials (serving.kv_budget_tokens={pool} per replica, "
                   f"rollout.concurrency={slots}); each recomputes its context",
                   "raise serving.kv_budget_tokens (`legorl preflight` prices its memory), lower "
                   "rollout.concurrency, or set serving.scheduler.enabled = true so new sessions wait "
                   "instead of evicting running ones")


OUTCOME_FIXES = {
    "timeout": "trials run past the agent timeout: raise agent.timeout_sec, lower rollout.concurrency "
               "if the host is saturated (compare timing/rollout_s), or lower max_turns / max_response_len",
    "context_overflow": "conversations outgrow the context: raise rollout.max_prompt_len (within the model's "
                        "window), lower rollout.max_turns, or truncate tool output in the scaffold",
    "agent_error": "the scaffold crashes: read agent/error.txt and agent/*.log in a trial dir "
                   "(`legorl dashboard` shows them per trial)",
    "infra_error": "sandbox host actors die or none is alive (cluster.runtime = \"ray\"): the reason names the "
                   "host and Ray's error; read that host's Ray worker logs, give hosts more memory/CPUs "
                   "(cluster.hosts) or raise cluster.max_restarts",
}


def outcome_dominates(d: RunData) -> Finding | None:
    """Most of a step's trials end the same non-policy way: the limits, not the policy, set the reward."""
    for step, trials in d.by_step.items():
        for outcome, fix in OUTCOME_FIXES.items():
            n = sum(1 for t in trials if t.get("outcome") == outcome)
            if trials and n / len(trials) > OUTCOME_DOMINATES:
                reason = next((t.get("reason") for t in trials if t.get("outcome") == outcome and t.get("reason")), "")
                return Finding(f"{outcome} dominates", f"step {step}: {n}/{len(trials)} trials ended in {outcome}"
                               + (f" ({reason})" if reason else ""), fix)
    return None


SIGNATURES: list[Callable[[RunData], Finding | None]] = [
    all_env_setup_failed, zero_rewards_verifier_errors, verifier_errors_share, zero_tool_calls, outcome_dominates, logprob_collapse,
    ess_collapse, staleness_drops, zero_std_groups, sandbox_latency_creep, length_capped_calls,
    kv_preemptions,
]


def diagnose(run: Run) -> list[Finding]:
    data = RunData.load(run)
    return [f for sig in SIGNATURES if (f := sig(data)) is not None]
