"""One typed run config, read from TOML.

Layering: site file (`$LEGORL_SITE_CONFIG` or `$LEGORL_HOME/site.toml`) < run file < `key=value`
overrides (`trainer.lr=1e-5`). Every key has a default, so a run file only says what differs.
Unknown keys, wrong types and impossible combinations are a `ConfigError` with one line per problem.
Knob names follow the field (verl/slime): `train_batch_size`, `n_resp_per_prompt`, `adv_estimator`...
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from legorl.models.store import DEFAULT_MODEL, legorl_home


class ConfigError(ValueError):
    """A config problem; `problems` holds one human-readable line per issue."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunSection(_Section):
    name: str = "run"
    output_dir: str = "runs"
    seed: int = 0
    metrics_sinks: list[str] = Field(default_factory=list)  # tensorboard / wandb / mlflow, beside the log files


class ModelSection(_Section):
    path: str = DEFAULT_MODEL
    gradient_checkpointing: bool = False
    enable_r3: bool | None = None  # R3 routing replay; None: on exactly when the model is MoE


class TasksSection(_Section):
    train: str = "builtin:shell-basics"
    include: list[str] = Field(default_factory=list)  # task-id globs to keep (empty: all)
    val: str | None = None  # None: hold out `val_fraction` of `train`
    val_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    split_seed: int = 0


class RolloutSection(_Section):
    engine: Literal["embedded", "vllm"] = "embedded"
    n_replicas: int = Field(1, ge=1)
    kv_budget_tokens: int = Field(32768, ge=256)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    max_prompt_len: int = Field(2048, ge=16)
    max_response_len: int = Field(256, ge=1)  # per model call
    max_turns: int = Field(4, ge=1)
    agent: str = "builtin"
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)  # passed to the scaffold's constructor
    tool_parser: str = "hermes"
    sandbox: str = "local"
    concurrency: int = Field(8, ge=1)
    agent_timeout_sec: float | None = None  # None: the task's own
    verifier_timeout_sec: float | None = None  # None: the task's own (raise it on an overloaded machine)
    train_mode: Literal["sync", "async"] = "sync"
    staleness_threshold: int = Field(0, ge=0)  # async: weight versions a trained rollout may lag the actor
    partial_rollout: bool | None = None  # None: on in async mode (resume aborted generations after a sync)
    runtime: Literal["local", "ray"] = "local"  # ray: engine, proxy and worker in a Ray actor; trainer here
    ray_address: str | None = None  # None: start a local Ray for the run (and stop it after)

    @property
    def partial_enabled(self) -> bool:
        return self.train_mode == "async" if self.partial_rollout is None else self.partial_rollout


class ServingSection(_Section):
    """Replica pool / load balancer / session scheduler (used when rollout.n_replicas > 1 or
    serving.scheduler is on; otherwise one engine behind the single-replica manager)."""

    placement: Literal["thread", "process"] = "thread"  # process: one spawned child per replica
    balancer: Literal["sticky", "round_robin"] = "sticky"
    max_sticky_sessions: int = Field(100_000, ge=1)  # LRU bound on session pins
    threads_per_replica: int | None = Field(None, ge=1)  # None: cores // n_replicas (min 1)
    scheduler: bool = False  # opt-in admission gate that protects prefix caches under KV pressure
    high_watermark: float = Field(0.85, gt=0.0, le=1.0)
    hit_threshold: float = Field(0.80, ge=0.0, le=1.0)
    wait_poll_sec: float = Field(5.0, gt=0.0)  # floored at 5 s (tests build SchedulerConfig directly)
    idle_grace_sec: float = Field(60.0, ge=0.0)
    max_wait_sec: float | None = Field(None, gt=0.0)  # None: wait until admitted
    preempt_superseded: bool = True
    attempt_overlap: float = Field(0.9, gt=0.0, le=1.0)
    count_pending: bool = True
    # rollout.engine = "vllm": one `vllm serve` per replica, started by legorl (or attached by URL)
    vllm_executable: str | None = None  # None: $LEGORL_VLLM, ./.venv-vllm/bin/vllm, then PATH
    vllm_urls: list[str] = Field(default_factory=list)  # attach to running servers instead (one per replica)
    vllm_dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"  # fp32 matches the CPU trainer
    vllm_kv_cache_gib: int = Field(2, ge=1)  # CPU build: KV cache GiB per server (whole GiB)
    vllm_gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)  # GPU build; None: vLLM's default
    vllm_tensor_parallel_size: int = Field(1, ge=1)
    vllm_enforce_eager: bool = True  # no graph capture: ~25 s start on CPU instead of ~150 s
    vllm_extra_args: list[str] = Field(default_factory=list)  # appended to `vllm serve`
    vllm_startup_timeout_sec: float = Field(600.0, gt=0.0)
    vllm_weights_dir: str | None = None  # where weight versions are written for reload; None: /dev/shm

    def scheduler_config(self):
        if not self.scheduler:
            return None
        from legorl.serving.scheduler import SchedulerConfig

        return SchedulerConfig(
            self.high_watermark, self.hit_threshold, max(self.wait_poll_sec, 5.0), self.idle_grace_sec,
            self.max_wait_sec, self.preempt_superseded, self.attempt_overlap, self.count_pending,
        ).floored()


class AlgorithmSection(_Section):
    adv_estimator: Literal["grpo", "rloo", "gae"] = "grpo"
    n_resp_per_prompt: int = Field(4, ge=1)
    norm_adv_by_std: bool = True
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    lam: float = Field(1.0, ge=0.0, le=1.0)
    policy_loss_mode: Literal["ppo", "gspo"] = "ppo"
    clip_ratio_low: float = Field(0.2, ge=0.0)
    clip_ratio_high: float = Field(0.28, ge=0.0)
    clip_ratio_c: float = Field(3.0, gt=1.0)  # dual-clip bound for negative advantages
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_coef: float = Field(0.0, ge=0.0)
    entropy_coef: float = Field(0.0, ge=0.0)
    rollout_is: Literal["none", "token", "sequence"] = "none"
    rollout_is_threshold: float = Field(2.0, gt=0.0)


class TrainerSection(_Section):
    train_batch_size: int = Field(4, ge=1)  # prompts (tasks) per step
    total_steps: int = Field(10, ge=1)
    lr: float = Field(1e-6, gt=0.0)
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, gt=0.0)
    micro_batch_size: int = Field(2, ge=1)
    ppo_epochs: int = Field(1, ge=1)
    critic_lr: float = Field(1e-5, gt=0.0)
    save_freq: int = Field(0, ge=0)  # 0: only at the end
    test_freq: int = Field(0, ge=0)  # 0: never
    val_before_train: bool = False
    val_n: int = Field(1, ge=1)  # attempts per held-out task at validation
    val_temperature: float | None = Field(None, ge=0.0)  # None: the rollout temperature
    max_logprob_abs_diff: float | None = Field(None, gt=0.0)  # refuse a batch past this rollout/trainer gap
    trigger_parameter_sync_step: int = Field(1, ge=1)  # async: trainer updates between two weight syncs


class RunConfig(_Section):
    run: RunSection = RunSection()
    model: ModelSection = ModelSection()
    tasks: TasksSection = TasksSection()
    rollout: RolloutSection = RolloutSection()
    serving: ServingSection = ServingSection()
    algorithm: AlgorithmSection = AlgorithmSection()
    trainer: TrainerSection = TrainerSection()

    def effective_rollout_is(self) -> str:
        """Async trains on data from older weights: token-level IS unless `rollout_is` was set explicitly."""
        if self.rollout.train_mode == "async" and "rollout_is" not in self.algorithm.model_fields_set:
            return "token"
        return self.algorithm.rollout_is

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        a, r = self.algorithm, self.rollout
        problems = []
        if a.adv_estimator in ("grpo", "rloo") and a.n_resp_per_prompt < 2:
            problems.append(
                f"algorithm.n_resp_per_prompt={a.n_resp_per_prompt} with adv_estimator={a.adv_estimator!r}: "
                "group baselines need at least 2 responses per prompt"
            )
        if r.partial_rollout and r.train_mode != "async":
            problems.append("rollout.partial_rollout=true needs rollout.train_mode='async'")
        if r.train_mode == "sync" and r.staleness_threshold:
            problems.append("rollout.staleness_threshold only applies to rollout.train_mode='async'")
        k = self.trainer.trigger_parameter_sync_step
        if r.train_mode == "sync" and k != 1:
            problems.append("trainer.trigger_parameter_sync_step only applies to rollout.train_mode='async'")
        if r.train_mode == "async" and r.staleness_threshold < k - 1:
            problems.append(
                f"trainer.trigger_parameter_sync_step={k} trains up to {k - 1} updates on one weight version: "
                f"rollout.staleness_threshold must be >= {k - 1} (got {r.staleness_threshold})"
            )
        v = self.serving
        if v.vllm_urls and r.engine != "vllm":
            problems.append("serving.vllm_urls is set but rollout.engine is not 'vllm'")
        if v.vllm_urls and len(v.vllm_urls) != r.n_replicas:
            problems.append(f"serving.vllm_urls lists {len(v.vllm_urls)} server(s) but rollout.n_replicas="
                            f"{r.n_replicas}: give one URL per replica")
        if r.engine == "vllm" and v.placement == "process":
            problems.append("serving.placement='process' is for embedded replicas; vLLM replicas are processes already")
        if a.policy_loss_mode == "gspo" and max(a.clip_ratio_low, a.clip_ratio_high) > 0.01:
            problems.append(
                "algorithm.policy_loss_mode='gspo' clips the length-normalized sequence ratio: use clip ratios "
                "around 3e-4..4e-4 (got clip_ratio_low/high = "
                f"{a.clip_ratio_low}/{a.clip_ratio_high})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such config file"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: invalid TOML: {exc}"]) from None


def _parse_override(item: str) -> dict[str, Any]:
    if "=" not in item:
        raise ConfigError([f"override {item!r}: expected key=value, e.g. trainer.lr=1e-5"])
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # bare strings need no quotes on the command line
    node: dict[str, Any] = {}
    cur = node
    parts = key.strip().split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return node


def site_config_path() -> Path:
    return Path(os.environ.get("LEGORL_SITE_CONFIG", legorl_home() / "site.toml"))


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        elif not loc:
            lines.extend(m.strip() for m in err["msg"].removeprefix("Value error, ").split(";"))
        else:
            lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return lines


def merge_layers(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """site file < run file < key=value overrides, merged, before validation."""
    data: dict[str, Any] = {}
    site = site_config_path()
    if site.is_file():
        data = _read_toml(site)
    if path is not None:
        data = _deep_merge(data, _read_toml(Path(path)))
    for item in overrides or []:
        data = _deep_merge(data, _parse_override(item))
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    data = merge_layers(path, overrides)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from None
