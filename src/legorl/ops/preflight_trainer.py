"""Preflight for the trainer at scale: the device and rank layout it asks for, and the rollout/trainer
logprob gap its precision pair should produce (so the fidelity gate is set where it catches real
mismatches without refusing every bf16 batch)."""

from __future__ import annotations

from legorl.config import RunConfig
from legorl.ops import hardware
from legorl.ops.checks import CheckResult, fatal, ok, warn
from legorl.train.device import expected_logprob_gap


def engine_dtype(cfg: RunConfig) -> str:
    """The rollout engine's compute dtype as configured (vLLM `auto`: the checkpoint's, bf16 in practice)."""
    if cfg.serving.engine == "vllm":
        d = cfg.serving.vllm.dtype
        return "bfloat16" if d == "auto" else d
    return cfg.serving.dtype


def check_precision(cfg: RunConfig) -> list[CheckResult]:
    name, t = "precision", cfg.trainer
    eng = engine_dtype(cfg)
    gap = expected_logprob_gap(eng, t.dtype)
    out = [ok(name, f"engine {eng} / trainer {t.dtype}: expect mean |rollout - trainer logprob| ~{gap.expected:g} "
                    f"(a gate of {gap.gate:g} passes it)")]
    if eng != t.dtype:
        out.append(warn(name, f"the engine samples in {eng} and the trainer computes in {t.dtype}: every ratio "
                              f"carries a ~{gap.expected:g} precision gap, not only staleness",
                        f"serving.dtype / trainer.dtype = the same ({t.dtype})"))
    if t.max_logprob_abs_diff is not None and t.max_logprob_abs_diff < gap.expected:
        out.append(warn(name, f"trainer.max_logprob_abs_diff={t.max_logprob_abs_diff:g} is below the gap this "
                              f"precision pair produces (~{gap.expected:g}): most batches will be refused",
                        f"trainer.max_logprob_abs_diff={gap.gate:g}"))
    return out


def check_trainer_layout(cfg: RunConfig) -> list[CheckResult]:
    name, t = "trainer", cfg.trainer
    out: list[CheckResult] = []
    gpus = hardware.count_gpus()
    if t.device.startswith("cuda") and not gpus:
        out.append(fatal(name, f"trainer.device={t.device!r} but no CUDA device is visible", 'trainer.device="auto"'))
    if t.n_ranks > 1 and cfg.algorithm.adv_estimator == "gae":
        out.append(fatal(name, "adv_estimator='gae' (a critic) runs with trainer.n_ranks = 1 only",
                         "trainer.n_ranks=1, or a critic-free estimator (grpo, rloo)"))
    on_gpu = bool(gpus) and t.device != "cpu"
    if t.n_ranks > 1 and on_gpu and t.n_ranks > gpus:
        out.append(fatal(name, f"trainer.n_ranks={t.n_ranks} but {gpus} GPU(s): one rank per GPU",
                         f"trainer.n_ranks={gpus}"))
    if t.cpu_offload and t.n_ranks == 1:
        out.append(warn(name, "trainer.cpu_offload applies to FSDP2 ranks only (trainer.n_ranks > 1)", ""))
    elif t.cpu_offload and not on_gpu:
        out.append(fatal(name, "trainer.cpu_offload moves FSDP2 state off the GPU: it needs CUDA",
                         "trainer.cpu_offload=false"))
    if not out:
        where = "GPU" if on_gpu else "CPU"
        out.append(ok(name, f"{t.n_ranks} rank(s) on {where}, {t.dtype}"))
    return out


def check_warm_start(cfg: RunConfig, structure_only: bool = False) -> list[CheckResult]:
    """A warm start that would fail after the runtime started: a scaffold that cannot render the tasks'
    demonstrations, training tasks without any, a transcripts file that is not there."""
    from pathlib import Path

    from legorl.train.warmstart import (
        TASK_DEMONSTRATIONS,
        demonstration_commands,
        scaffold_problem,
        split_for_warm_start,
    )

    w, name = cfg.warm_start, "warm-start"
    if not w.enabled:
        return []
    schedule = f"{w.epochs} epoch(s)" + (f"; {w.rl_nll_batch} of them replayed in each RL update (warm_start.rl_nll_coef "
                                       f"{w.rl_nll_coef:g})" if w.rl_nll_coef else "")
    if w.data != TASK_DEMONSTRATIONS:
        if not structure_only and not Path(w.data).expanduser().is_file():
            return [fatal(name, f"warm_start.data={w.data!r} not found",
                          f"a JSONL file of transcripts, or {TASK_DEMONSTRATIONS!r}")]
        return [ok(name, f"SFT on {w.data}, {schedule}")]
    problem = scaffold_problem(cfg)
    if problem:
        return [fatal(name, problem)]
    if structure_only:
        return [ok(name, f"SFT on the training tasks' demonstrations, {schedule}")]
    from legorl.tasks.split import load_task_split

    train, _ = load_task_split(cfg.tasks)
    try:
        demo, rl = split_for_warm_start(cfg, train)
    except ValueError as exc:
        return [fatal(name, str(exc))]
    have = sum(demonstration_commands(t) is not None for t in demo)
    if not have:
        return [fatal(name, f"none of the {len(demo)} warm-start tasks has solution/demonstration.json",
                      "add demonstrations, give a JSONL file of transcripts, or warm_start.enabled=false")]
    rest = f"; RL on the other {len(rl)}" if rl is not train else ""
    return [ok(name, f"SFT on {have} of {len(train)} training tasks' demonstrations{rest}, {schedule}")]
