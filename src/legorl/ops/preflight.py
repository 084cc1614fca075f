"""`legorl preflight`: config-only checks that refuse a run which would fail expensively.

Each check is a small function `(cfg, ...) -> list[CheckResult]`; `run_preflight` runs them all and
never raises (a crashing check becomes a WARN line), so `legorl train` can call it first and refuse
on any FATAL. `structure_only` skips what needs this host: model files, task dirs, the sandbox.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from legorl.config import ConfigError, RunConfig
from legorl.ops import hardware
from legorl.ops.checks import CheckResult, fatal, format_results, ok, print_results, skip, warn
from legorl.ops.preflight_memory import check_memory
from legorl.ops.preflight_model import check_model_path, check_r3, check_tool_parser, model_dir_for
from legorl.ops.preflight_trainer import check_precision, check_trainer_layout, check_warm_start

__all__ = ["CheckResult", "format_results", "print_results", "run_preflight", "run_preflight_dict"]

LONG_SEQUENCE_TOKENS = 1024  # sequence-level IS over more policy tokens than this is a variance bomb
MANY_STEPS = 1000  # a decaying LR over this many steps is usually a "run until I stop it" config
CLIP_OFF = 4.0  # clip_ratio_high at or past this: an upper clip at >= 5x the old probability never binds
IS_TRUNCATION_OFF = 100.0  # importance weights truncated only past this are not truncated in practice
TRIALS_PER_CORE = 16  # trials mostly wait on the model; beyond this the host itself is the bottleneck


# ---- batch arithmetic ------------------------------------------------------------------------------
def check_batch_raw(data: dict[str, Any]) -> list[CheckResult]:
    """GRPO/RLOO baselines need a group; the typed config refuses this too, this names it first."""
    algo = data.get("algorithm") or {}
    est = algo.get("adv_estimator", "grpo")
    n = algo.get("n_resp_per_prompt", 4)
    if est in ("grpo", "rloo") and isinstance(n, int) and n < 2:
        return [fatal("batch", f"algorithm.n_resp_per_prompt={n} with adv_estimator={est!r}: a group of one "
                               "has zero advantage, so nothing is learned", "set algorithm.n_resp_per_prompt >= 2")]
    return []


def check_batch(cfg: RunConfig) -> list[CheckResult]:
    a, t = cfg.algorithm, cfg.trainer
    out = check_batch_raw(cfg.model_dump())
    if out:
        return out
    trials = t.train_batch_size * a.n_resp_per_prompt
    out.append(ok("batch", f"{t.train_batch_size} tasks × {a.n_resp_per_prompt} responses = {trials} trials "
                           f"per step, {t.total_steps} steps"))
    if t.micro_batch_size > trials:
        out.append(warn("batch", f"trainer.micro_batch_size={t.micro_batch_size} > {trials} sequences per step",
                        f"set trainer.micro_batch_size <= {trials}"))
    if a.adv_estimator in ("grpo", "rloo") and cfg.rollout.temperature == 0:
        out.append(warn("batch", "rollout.temperature=0 with a group baseline: identical responses, "
                                 "every group has zero std and zero advantage", "sample with temperature > 0"))
    return out


# ---- topology --------------------------------------------------------------------------------------
def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_topology(cfg: RunConfig, structure_only: bool = False, cores: int | None = None,
                   gpus: int | None = None) -> list[CheckResult]:
    r, s, name = cfg.rollout, cfg.serving, "topology"
    trials = cfg.trainer.train_batch_size * cfg.algorithm.n_resp_per_prompt
    waves = math.ceil(trials / r.concurrency)
    out = [ok(name, f"{s.n_replicas} {s.engine} replica(s), concurrency {r.concurrency}: "
                    f"{trials} trials per step in {waves} wave(s)")]
    t, tasks = cfg.trainer, cfg.tasks
    validates = (t.test_freq > 0 or t.val_before_train) and (tasks.val is not None or tasks.val_fraction > 0)
    if r.concurrency > trials and validates:  # a validation pass runs its trials through the same slots
        out.append(ok(name, f"rollout.concurrency={r.concurrency} > {trials} trials per step: the slots "
                            f"beyond {trials} serve validation's trials (held-out tasks x trainer.val_n)"))
    elif r.concurrency > trials:
        out.append(warn(name, f"rollout.concurrency={r.concurrency} > {trials} trials per step: "
                              "the extra slots stay idle", f"set rollout.concurrency <= {trials}"))
    if s.n_replicas > r.concurrency:
        out.append(warn(name, f"serving.n_replicas={s.n_replicas} > rollout.concurrency={r.concurrency}: "
                              "some replicas never get a request", "raise rollout.concurrency"))
    if structure_only:
        out.append(skip(name, "cores and GPUs of this host not compared (--structure-only)"))
        return out
    cores = host_cores() if cores is None else cores
    gpus = hardware.count_gpus() if gpus is None else gpus
    if r.concurrency > TRIALS_PER_CORE * cores:
        out.append(warn(name, f"rollout.concurrency={r.concurrency} on {cores} core(s): sandboxes and "
                              "scaffolds will starve each other", f"keep it <= {TRIALS_PER_CORE * cores}"))
    if s.engine == "vllm":
        out += check_vllm(cfg, gpus)
    elif s.n_replicas > max(gpus, cores):
        out.append(warn(name, f"{s.n_replicas} embedded replicas on {cores} core(s) and {gpus} GPU(s): "
                              "they share the same compute", "use fewer replicas"))
    return out


def check_vllm(cfg: RunConfig, gpus: int) -> list[CheckResult]:
    """vLLM installed (or attached), replicas x tensor parallel fit the GPUs, logprob semantics."""
    r, s, v, name = cfg.rollout, cfg.serving, cfg.serving.vllm, "vllm"
    out: list[CheckResult] = []
    if not v.urls:
        from legorl.serving.vllm.server import VLLMNotInstalledError, find_vllm_executable

        try:
            out.append(ok(name, f"vLLM executable {find_vllm_executable(v.executable)}"))
        except VLLMNotInstalledError as e:
            out.append(fatal(name, str(e).split(": ")[0], "run `bash scripts/setup.sh` (builds .venv-vllm) or set "
                                                           "serving.vllm.executable"))
    need = s.n_replicas * v.tensor_parallel_size
    if gpus == 0:
        out.append(ok(name, f"no GPU visible: {s.n_replicas} server(s) on vLLM's CPU build, "
                            f"{v.kv_cache_gib:g} GiB KV each"))
    elif need > gpus:
        out.append(fatal(name, f"{s.n_replicas} vLLM replica(s) x tensor_parallel_size "
                               f"{v.tensor_parallel_size} need {need} GPUs; {gpus} visible",
                         "lower serving.n_replicas or serving.vllm.tensor_parallel_size"))
    if r.temperature != 1.0:
        out.append(warn(name, f"rollout.temperature={r.temperature}: vLLM's prompt logprobs are at temperature "
                              "1, so a scaffold that rewrites history cannot get its prefix re-scored",
                        "use temperature 1.0 or the embedded engine for history-rewriting scaffolds"))
    if r.top_p < 1.0 or r.top_k > 0:
        out.append(warn(name, "top_p/top_k with vLLM: sampled-token logprobs are of the truncated distribution, "
                              "the trainer recomputes the full one (ratios drift off 1)",
                        "keep rollout.top_p=1 and top_k=0 for RL"))
    return out


def check_decode_attention(cfg: RunConfig, structure_only: bool = False) -> list[CheckResult]:
    """The embedded engine's decode attention: the C kernel builds here (serving.decode_attention)."""
    s, name = cfg.serving, "engine"
    if s.engine != "embedded":
        return []
    if s.decode_attention == "torch":
        return [ok(name, "decode attention: the torch gather path (serving.decode_attention = torch)")]
    import torch

    on_gpu = s.device.startswith("cuda") or (s.device == "auto" and torch.cuda.is_available())
    if s.dtype != "float32" or on_gpu:
        where = f"{s.dtype} on {'CUDA' if on_gpu else 'the CPU'}"
        if s.decode_attention == "kernel":
            return [fatal(name, f"serving.decode_attention = kernel needs an fp32 KV pool on the CPU ({where})",
                          "set serving.decode_attention = auto or torch")]
        return [ok(name, f"decode attention: the torch path ({where}; the C kernel is fp32 CPU only)")]
    if structure_only:
        return [skip(name, "decode kernel not built (structure only)")]
    from legorl.serving.embedded.decode_kernel import KernelUnavailable, load

    try:
        lib = load()
    except KernelUnavailable as e:
        if s.decode_attention == "kernel":
            return [fatal(name, f"the decode kernel does not build here: {e}",
                          "install a C compiler (gcc) or set serving.decode_attention = auto")]
        return [warn(name, f"decode attention falls back to the torch gather path (the C kernel does not build: "
                           f"{e}); decode steps run slower", "install a C compiler (gcc), or set "
                                                             "serving.decode_attention = torch to say so")]
    return [ok(name, f"decode attention: the C kernel ({Path(lib._name).name})"), *_check_decode_linear(cfg)]


def _check_decode_linear(cfg: RunConfig) -> list[CheckResult]:
    """Which path the replicas' few-row linears take (serving.decode_linear; the library built above)."""
    import torch

    from legorl.serving.embedded.decode_kernel import KernelUnavailable
    from legorl.serving.embedded.skinny_linear import resolve
    from legorl.serving.launch import default_threads_per_replica

    s = cfg.serving
    threads = s.threads_per_replica or default_threads_per_replica(s.n_replicas)
    try:
        kernel = resolve(s.decode_linear, torch.float32, torch.device("cpu"), threads)
    except KernelUnavailable as e:
        return [fatal("engine", f"serving.decode_linear = kernel cannot run here: {e}",
                      "set serving.decode_linear = auto or torch")]
    if kernel:
        return [ok("engine", "decode steps' linears: the C kernel (serving.decode_linear); steps of decode rows only "
                             "skip the HF modules for a dense Llama / Qwen2 / Qwen3 (serving/embedded/lean.py)")]
    return [ok("engine", f"decode steps' linears: BLAS (serving.decode_linear = {s.decode_linear}; {threads} "
                         "thread(s) a replica, the kernel runs one)")]


# ---- sandbox ---------------------------------------------------------------------------------------
def _run_coro(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even when called inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_sandbox(cfg: RunConfig, structure_only: bool = False,
                  probe: Callable[[str], list[tuple[str, str]]] | None = None) -> list[CheckResult]:
    from legorl.env import BACKENDS, sandbox_class

    backend, name = cfg.sandbox.backend, "sandbox"
    try:
        cls = sandbox_class(backend)  # a registered name or an importable `module:Class`
    except ValueError as exc:
        return [fatal(name, f"sandbox.backend: {exc}",
                      f"set sandbox.backend to {', '.join(BACKENDS)} or an importable 'module:Class'")]
    if not callable(cls):
        return [fatal(name, f"sandbox.backend={backend!r} is not a class", "name a Sandbox class: 'module:Class'")]
    if structure_only:
        return [skip(name, f"{backend} sandbox not started (--structure-only)")]
    if probe is None:
        from legorl.env import check_backend

        def probe(b: str) -> list[tuple[str, str]]:
            return _run_coro(check_backend(b))

    levels = {"PASS": ok, "WARN": warn, "FATAL": fatal}
    return [levels.get(level, warn)(name, msg) for level, msg in probe(backend)]


# ---- tasks -----------------------------------------------------------------------------------------
def _task_set(spec: str, what: str, structure_only: bool) -> tuple[list[CheckResult], int | None]:
    from legorl.tasks import collect_tasks

    if structure_only and not spec.startswith("builtin:"):
        return [skip("tasks", f"{what} {spec!r} not read (--structure-only)")], None
    try:
        tasks, problems = collect_tasks(spec)
    except (KeyError, OSError, ValueError) as exc:
        return [fatal("tasks", f"{what} {spec!r}: {str(exc).strip(chr(39))}", f"fix {what}")], None
    if not tasks:
        first = f": {problems[0]}" if problems else ""
        return [fatal("tasks", f"{what} {spec!r} has no valid task{first}", f"fix {what}")], 0
    out = [ok("tasks", f"{what} {spec!r}: {len(tasks)} task(s)")]
    if problems:
        out.append(warn("tasks", f"{what} {spec!r}: {len(problems)} problem(s), first: {problems[0]}",
                        "`legorl tasks validate` lists them"))
    return out, len(tasks)


def check_tasks(cfg: RunConfig, structure_only: bool = False) -> list[CheckResult]:
    t = cfg.tasks
    out, n = _task_set(t.train, "tasks.train", structure_only)
    if t.val is not None:
        val_out, n_val = _task_set(t.val, "tasks.val", structure_only)
        out += val_out
    elif n is not None:
        n_val = int(n * t.val_fraction)  # the exact split rounds per task set; close enough to warn
        n -= n_val
    else:
        n_val = None
    wants_val = cfg.trainer.test_freq > 0 or cfg.trainer.val_before_train
    if wants_val and n_val == 0:
        out.append(warn("tasks", "validation is on (trainer.test_freq / val_before_train) but no task is held out",
                        "set tasks.val or tasks.val_fraction > 0"))
    if n and cfg.trainer.train_batch_size > n:
        out.append(warn("tasks", f"trainer.train_batch_size={cfg.trainer.train_batch_size} > {n} training tasks: "
                                 "the same task repeats within a step", "lower train_batch_size or add tasks"))
    return out


# ---- silent pitfalls -------------------------------------------------------------------------------
def check_pitfalls(cfg: RunConfig) -> list[CheckResult]:
    """Settings that run fine and quietly waste the run."""
    a, r, s, t, name = cfg.algorithm, cfg.rollout, cfg.serving, cfg.trainer, "pitfall"
    out: list[CheckResult] = []
    if t.lr_scheduler != "constant" and t.warmup_steps >= t.total_steps:
        out.append(warn(name, f"trainer.warmup_steps={t.warmup_steps} >= total_steps={t.total_steps}: "
                              "the LR never reaches its peak", "shorten the warmup"))
    if t.lr_scheduler in ("cosine", "linear") and t.total_steps >= MANY_STEPS:
        out.append(warn(name, f"{t.lr_scheduler} LR decay over {t.total_steps} steps: stopping early trains at "
                              "~peak LR, finishing trains the last steps at ~0",
                        "lr_scheduler='constant' for open-ended RL runs"))
    seq_tokens = r.max_response_len * r.max_turns
    if a.rollout_is == "sequence" and seq_tokens > LONG_SEQUENCE_TOKENS:
        out.append(warn(name, f"sequence-level IS over up to {seq_tokens} policy tokens: the weight is a product "
                              "of per-token ratios and its variance explodes", "algorithm.rollout_is='token'"))
    out += _off_policy_pitfalls(cfg)
    if t.max_logprob_abs_diff is None:
        out.append(warn(name, "trainer.max_logprob_abs_diff unset: a sampler/trainer logprob mismatch trains "
                              "silently on wrong ratios", "trainer.max_logprob_abs_diff=1e-3"))
    longest = r.max_prompt_len + r.max_response_len
    have = s.kv_budget_tokens * s.n_replicas
    if s.engine == "embedded" and s.kv_budget_tokens < longest:
        out.append(warn(name, f"a replica's KV pool ({s.kv_budget_tokens} tokens) is smaller than one trial "
                              f"at its longest (max_prompt_len + max_response_len = {longest} tokens): a "
                              "call whose context outgrows the pool fails (context_overflow)",
                        "raise serving.kv_budget_tokens or lower rollout.max_prompt_len"))
    elif s.engine == "embedded" and have < r.concurrency * longest:
        # a bound from the config: how long trials really grow shows in the run's budget/engine/preemptions
        out.append(warn(name, f"KV budget {have} tokens holds {have // longest} of the {r.concurrency} "
                              f"concurrent trials at their longest (max_prompt_len + max_response_len = "
                              f"{longest} tokens): more that long at once are preempted and recompute their "
                              "contexts (the run reports budget/engine/preemptions; `legorl doctor` names "
                              "steps that pay for it)",
                        "if the trials grow that long, raise serving.kv_budget_tokens or lower "
                        "rollout.concurrency"))
    if not out:
        out.append(ok(name, "no known silent pitfall"))
    return out


def _off_policy_pitfalls(cfg: RunConfig) -> list[CheckResult]:
    """Async with nothing correcting stale data, and settings under which PPO's clip never binds."""
    a, name, out = cfg.algorithm, "pitfall", []
    asyn = cfg.async_training
    uncorrected = cfg.effective_rollout_is() == "none" and a.rollout_rs == "none" and a.ppo_anchor == "proximal"
    if asyn.enabled and uncorrected:
        # with one optimizer step per batch the ratio to the proximal policy stays 1: PPO's clip never binds
        no_clip = (" and, with trainer.ppo_epochs=1, clipping never binds (the ratio to the proximal policy is 1)"
                   if cfg.trainer.ppo_epochs == 1 and cfg.trainer.ppo_mini_batch_size is None else "")
        out.append(warn(name, f"async training (staleness_threshold={asyn.staleness_threshold}"
                              f"{', partial rollout' if asyn.partial_enabled else ''}) with no off-policy "
                              f"correction: rollouts from older weights are trained as on-policy{no_clip}",
                        "algorithm.rollout_is='token' (or 'masked', or rollout_rs='geometric')"))
    if a.clip_ratio_low >= 1.0:
        out.append(warn(name, f"algorithm.clip_ratio_low={a.clip_ratio_low} >= 1: the lower clip 1 - clip_ratio_low "
                              "<= 0 never binds (clipping is off for negative advantages' ratios)",
                        "clip_ratio_low=0.2"))
    if a.clip_ratio_high >= CLIP_OFF:
        out.append(warn(name, f"algorithm.clip_ratio_high={a.clip_ratio_high}: an upper clip at "
                              f"{1 + a.clip_ratio_high:g} practically never binds", "clip_ratio_high=0.28"))
    if a.rollout_is in ("token", "sequence") and a.rollout_is_threshold >= IS_TRUNCATION_OFF:
        out.append(warn(name, f"algorithm.rollout_is_threshold={a.rollout_is_threshold}: importance weights up to "
                              "that are not truncated in practice (high-variance updates)", "rollout_is_threshold=2"))
    if a.rollout_rs != "none" and a.rollout_rs_low <= 0.0 and a.rollout_rs_high >= IS_TRUNCATION_OFF:
        out.append(warn(name, f"algorithm.rollout_rs={a.rollout_rs!r} accepts every ratio in "
                              f"[{a.rollout_rs_low}, {a.rollout_rs_high}]: nothing is rejected",
                        "rollout_rs_low=0.5, rollout_rs_high=2"))
    return out


# ---- the runner ------------------------------------------------------------------------------------
def _guard(fn: Callable[[], list[CheckResult]], name: str) -> list[CheckResult]:
    try:
        return fn()
    except Exception as exc:  # a broken check must not block (or crash) a run
        return [warn(name, f"check crashed: {type(exc).__name__}: {exc}")]


def run_preflight(cfg: RunConfig | dict[str, Any], structure_only: bool = False,
                  prepare_model: bool = False) -> list[CheckResult]:
    """Every check, in a fixed order; FATAL in the result means: refuse to start. A raw config dict
    is validated first (its problems become FATAL lines).

    `prepare_model=True` (for `legorl train`, which prepares it anyway) builds a registered model
    that is not in the store yet, so the template and R3 checks can read it instead of skipping."""
    if isinstance(cfg, dict):
        return run_preflight_dict(cfg, structure_only, prepare_model)
    so = structure_only
    if prepare_model and not so:
        from legorl.models import resolve_model

        try:
            resolve_model(cfg.model.path, prepare=True)
        except Exception:  # the paths check reports it
            pass
    try:
        model_dir = None if so else model_dir_for(cfg)
    except Exception:  # the paths check reports it
        model_dir = None
    results: list[CheckResult] = []
    checks: list[tuple[str, Callable[[], list[CheckResult]]]] = [
        ("batch", lambda: check_batch(cfg)),
        ("paths", lambda: check_model_path(cfg, so)),
        ("tasks", lambda: check_tasks(cfg, so)),
        ("tool-parser", lambda: check_tool_parser(cfg, model_dir, so)),
        ("r3", lambda: check_r3(cfg, model_dir, so)),
        ("topology", lambda: check_topology(cfg, so)),
        ("engine", lambda: check_decode_attention(cfg, so)),
        ("sandbox", lambda: check_sandbox(cfg, so)),
        ("trainer", lambda: check_trainer_layout(cfg)),
        ("precision", lambda: check_precision(cfg)),
        ("warm-start", lambda: check_warm_start(cfg, so)),
        ("pitfall", lambda: check_pitfalls(cfg)),
        ("memory", lambda: check_memory(cfg, model_dir, so)),
    ]
    for name, fn in checks:
        results += _guard(fn, name)
    return results


def run_preflight_dict(data: dict[str, Any], structure_only: bool = False,
                       prepare_model: bool = False) -> list[CheckResult]:
    """Like run_preflight for a raw (merged) config dict: invalid configs become FATAL lines."""
    from pydantic import ValidationError

    from legorl.config.loading import _format_errors

    results = check_batch_raw(data)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = _format_errors(exc)
        if results:  # the batch line already names the group-size problem
            problems = [p for p in problems if "n_resp_per_prompt" not in p]
        return results + [fatal("config", p) for p in problems]
    return run_preflight(cfg, structure_only, prepare_model)


def load_raw_config(path: str | Path | None, overrides: list[str] | None = None) -> dict[str, Any]:
    """The merged site + run file + overrides dict, before validation (what `load_config` validates)."""
    from legorl.config import merge_layers

    return merge_layers(path, overrides)


def preflight_file(path: str | Path, overrides: list[str] | None = None,
                   structure_only: bool = False) -> list[CheckResult]:
    try:
        data = load_raw_config(path, overrides)
    except ConfigError as exc:
        return [fatal("config", p) for p in exc.problems]
    return run_preflight_dict(data, structure_only)
