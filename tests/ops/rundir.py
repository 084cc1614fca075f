"""Crafted run dirs in the layout `legorl train` writes (config.json, logs/, trials/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from legorl.config import RunConfig


def base_record(step: int) -> dict[str, Any]:
    return {
        "critic/score/mean": 0.2 + 0.1 * step, "rollout/pass_rate": 0.1 * step, "actor/entropy": 1.5 - 0.1 * step,
        "actor/ppo_kl": 0.001 * step, "actor/pg_clipfrac": 0.01 * step, "actor/grad_norm": 0.5 + 0.05 * step,
        "response_length/mean": 40 + step, "critic/advantages/mean": 0.0,
        "rollout_corr/abs_diff_mean": 1e-5, "rollout_corr/abs_diff_max": 1e-4, "rollout_corr/pearson": 0.9999,
        "rollout_corr/kl": 1e-7, "grpo/num_groups": 4, "grpo/zero_std_groups": 1,
        "rollout/outcome/solved": 0.25, "rollout/outcome/failed": 0.75,
        "trajectory_filter/kept": 8.0, "trajectory_filter/dropped": 0.0, "trajectory_filter/invalid_ratio": 0.0,
        "timing/rollout_s": 20.0, "timing/update_s": 3.0, "timing/step_s": 25.0,
        "rollout/turns/mean": 2.0 + 0.1 * step, "rollout/turns/tool_calls_mean": 1.5, "rollout/turns/parse_failures": 1.0,
        "rollout/turns/parse_failure_rate": 0.1, "rollout/turns/solved_multi_turn_share": 0.5,
        "rollout/turns/response_mask_share": 0.2, "rollout/turns/length_capped_share": 0.05,
        "budget/engine/preemptions": 0.0,
    }


def trial(step: int, trial_id: str, task: str, outcome: str = "failed", reward: float | None = 0.0,
          sandbox_start: float = 0.5, tool_calls: int = 1, parse_failures: int = 0, commands: int = 1,
          reason: str = "") -> dict[str, Any]:
    return {
        "trial_id": trial_id, "task_id": task, "attempt": int(trial_id[-1]), "group_id": f"step_{step}:{task}",
        "step": step, "reward": reward, "outcome": outcome, "reason": reason, "turns": 2, "tokens": 12,
        "policy_tokens": 5, "duration_s": 3.0,
        "timings": {"sandbox_start": sandbox_start, "agent": 2.0, "verify": 0.3, "total": 3.0},
        "metadata": {"scaffold_commands": commands, "scaffold_tool_calls": tool_calls,
                     "counters": {"calls": 2, "tool_calls": tool_calls, "tool_parse_failures": parse_failures}},
    }


def trajectory(token_ids: list[int]) -> dict[str, Any]:
    n = len(token_ids)
    mask = [0] * (n // 2) + [1] * (n - n // 2)
    return {
        "session_id": "s1", "model": "policy", "context_overflow": False, "metadata": {}, "counters": {"calls": 2},
        "branches": [{
            "index": 0, "kind": "main", "token_ids": token_ids, "mask": mask,
            "logprobs": [None if m == 0 else -0.1 * (i % 5) for i, m in enumerate(mask)],
            "weight_versions": [-1 if m == 0 else 1 for m in mask], "routed_experts": None,
            "messages": [{"role": "system", "content": "You are a shell agent."},
                         {"role": "user", "content": "Create /app/a.txt"},
                         {"role": "assistant", "content": "```bash\necho hi > /app/a.txt\n```"}],
            "tools": [], "recomputed_spans": [], "superseded": [], "calls": 1,
        }],
    }


def make_run(root: Path, name: str = "exp", steps: int = 3, records: list[dict[str, Any]] | None = None,
             trials: list[dict[str, Any]] | None = None, config: dict[str, Any] | None = None,
             token_ids: list[int] | None = None) -> Path:
    """A run dir; default: `steps` healthy steps, 2 tasks × 2 attempts per step, each with a trajectory."""
    run = root / name
    (run / "logs").mkdir(parents=True)
    cfg = RunConfig.model_validate({"run": {"name": name}, "trainer": {"total_steps": 10}, **(config or {})})
    (run / "config.json").write_text(cfg.model_dump_json(indent=2))
    if records is None:
        records = [{"step": s, **base_record(s)} for s in range(1, steps + 1)]
        records[-1].update({"val/pass_rate": 0.5, "val/score/mean": 0.5, "val/outcome/solved": 0.5,
                            "val/turns/mean": 2.5, "val/turns/response_mask_share": 0.2})
    with (run / "logs" / f"{name}.jsonl").open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    if trials is None:
        trials = [trial(s, f"step_{s}-{i:03d}-{j}", task, "solved" if (i + j + s) % 2 else "failed",
                        1.0 if (i + j + s) % 2 else 0.0)
                  for s in range(1, steps + 1) for i, task in enumerate(["make-file", "rename-file"]) for j in range(2)]
    for t in trials:
        d = run / "trials" / name / f"step_{t['step']}" / t["trial_id"]
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps({**t, "artifacts_dir": str(d)}))
        (d / "proxy_trajectory.json").write_text(json.dumps(trajectory(token_ids or list(range(100, 112)))))
    return run
