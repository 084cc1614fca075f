"""What a run trains and how each trial runs: the run, model, tasks, rollout, agent and sandbox sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from legorl.config.base import Section
from legorl.models.store import DEFAULT_MODEL


class RunSection(Section):
    """Where the run lives (`<output_dir>/<name>/`) and how it is seeded."""

    name: str = "run"
    """The run's name: its directory under `output_dir` and its log file names."""
    output_dir: str = "runs"
    """Parent directory of run directories."""
    seed: int = 0
    """Seeds Python, NumPy, torch, the task sampler and the engines' sampling."""
    metrics_sinks: list[str] = Field(default_factory=list)
    """Extra metrics sinks beside the log files: `tensorboard`, `wandb`, `mlflow` (empty: `$LEGORL_METRICS_SINKS`)."""


class LoraSection(Section):
    """A LoRA adapter on the policy (docs/lora.md): only the adapter trains, syncs and checkpoints."""

    rank: int = Field(0, ge=0)
    """Adapter rank r (0: no adapter, full fine-tuning). Each targeted Linear W gets W + (alpha / r) B A."""
    alpha: float = Field(16.0, gt=0.0)
    """Scaling numerator: the update is (alpha / rank) B A."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input while training. Off unless you need it: the update runs the model in eval
    mode (the sampler's numerics), so a non-zero value is refused until dropout can be applied identically."""
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Linear layers that get an adapter: their names (`q_proj`, `v_proj`, ...; a module matches when its last
    name part is listed) or `all-linear` (every Linear in the decoder layers; never the LM head or routers)."""
    init: Literal["zeros", "gaussian"] = "zeros"
    """`zeros`: A Kaiming-uniform, B zero, so step 0 is the base model exactly (PEFT's default). `gaussian`: B
    small random too (tests that need a non-trivial adapter from the start)."""

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @model_validator(mode="after")
    def _check(self) -> LoraSection:
        if self.dropout > 0:
            raise ValueError("model.lora.dropout > 0 is not supported: the update forward runs without dropout "
                             "so it matches the sampler (use 0)")
        if isinstance(self.target_modules, list) and not self.target_modules:
            raise ValueError("model.lora.target_modules is empty: name modules (q_proj, ...) or use 'all-linear'")
        return self


class ModelSection(Section):
    """The policy model."""

    path: str = DEFAULT_MODEL
    """A registered model name (`legorl models list`) or a local Hugging Face model directory."""
    gradient_checkpointing: bool | Literal["long_rows"] = False
    """Recompute activations in the backward pass: less memory, ~30% more compute. `long_rows`: the update
    recomputes only a micro-batch longer than `trainer.max_tokens_per_micro_batch` (a row over the budget trains
    alone), so its activations stay within the budget's at the speed of no checkpointing for the rest. The warm
    start recomputes only a row whose activations would pass ~1 GB, with `true` or `long_rows`."""
    enable_r3: bool | None = None
    """R3 routing replay (MoE): replay the experts chosen at generation in the training forward. None: on exactly when the model is MoE."""
    lora: LoraSection = LoraSection()
    """A LoRA adapter (`model.lora.rank > 0` turns it on)."""


class TasksSection(Section):
    """Which tasks train and which validate."""

    train: str = "builtin:shell-basics"
    """A task dir, a dir of task dirs, a parquet index, or `builtin:<set>` (`legorl tasks builtin`)."""
    include: list[str] = Field(default_factory=list)
    """Task-id globs to keep from `train` (empty: all)."""
    val: str | None = None
    """Held-out tasks, same forms as `train`. None: hold out `val_fraction` of `train`."""
    val_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    """Share of `train` held out for validation when `val` is unset."""
    split_seed: int = 0
    """Seed of the train/val split."""
    stratify_by: str | None = None
    """A `task.toml` [metadata] key (e.g. `kind`): hold out `val_fraction` of each value's tasks, so every
    kind is in both sides. None: one split over all tasks."""
    holdout_by: str | None = None
    """A `task.toml` [metadata] key (e.g. `kind`): validation gets *whole values* of it, `val_fraction` of the
    distinct values (drawn by `split_seed`) or those `holdout_values` names, so it measures kinds training never
    saw rather than new hidden values of seen kinds. Exclusive with `stratify_by`. None: off."""
    holdout_values: list[str] = Field(default_factory=list)
    """With `holdout_by`: globs of the values to hold out (e.g. `["*-delete", "csv-*"]`) instead of a
    `val_fraction` draw."""

    @model_validator(mode="after")
    def _one_split_rule(self) -> TasksSection:
        if self.holdout_by is not None and self.stratify_by is not None:
            raise ValueError("tasks: set holdout_by (whole values held out) or stratify_by (a share of each value), "
                             "not both")
        if self.holdout_values and self.holdout_by is None:
            raise ValueError("tasks.holdout_values needs tasks.holdout_by (the [metadata] key they are values of)")
        return self

    sampling: Literal["uniform", "pass_rate"] = "uniform"
    """How training steps pick tasks. `uniform`: a seeded shuffle per epoch. `pass_rate`: the same order, but a
    task whose last `pass_rate_window` trials all scored 0 or all 1 (its GRPO group would carry no signal) is
    drawn only with probability `dead_task_weight`, so rollouts go to tasks the policy sometimes solves; the
    record is checkpointed, so `--resume` continues it."""
    pass_rate_window: int = Field(8, ge=1)
    """`pass_rate`: trials per task remembered (a task needs this many before it can count as dead)."""
    dead_task_weight: float = Field(0.1, ge=0.0, le=1.0)
    """`pass_rate`: the chance a dead task is drawn anyway (re-measured as the policy changes; 0: never again)."""
    sample_by: str | None = None
    """`pass_rate`: a `task.toml` [metadata] key (e.g. `kind`) to keep the records per value instead of per
    task: the window holds the value's last trials over all its tasks, and a draw of any task of a dead value
    (even one never drawn) is passed over, so the sampler can act when there are many tasks each drawn
    rarely. A dead value is still drawn with `dead_task_weight` (must be > 0) and at the latest on its
    ceil(1 / dead_task_weight)-th draw in a row, so no kind is starved. None: per task."""

    @model_validator(mode="after")
    def _sample_by_needs_pass_rate(self) -> TasksSection:
        if self.sample_by is not None and self.sampling != "pass_rate":
            raise ValueError("tasks.sample_by keys the pass-rate records: it needs tasks.sampling = 'pass_rate'")
        if self.sample_by is not None and self.dead_task_weight == 0:
            raise ValueError("tasks.sample_by needs tasks.dead_task_weight > 0: a dead kind would never be drawn again")
        return self


class RolloutSection(Section):
    """How one trial samples from the policy, and how many trials run at once."""

    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature of training trials (0: greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling (0: off)."""
    max_prompt_len: int = Field(2048, ge=16)
    """Longest prompt (the whole conversation so far) a model call may send, in tokens."""
    max_response_len: int = Field(256, ge=1)
    """New tokens per model call."""
    max_turns: int = Field(4, ge=1)
    """Model calls per trial."""
    concurrency: int = Field(8, ge=1)
    """Trials in flight at once (each holds a sandbox and a scaffold)."""
    verifier_error_warn_share: float = Field(0.2, ge=0.0, le=1.0)
    """A step with a larger share of `verifier_error` trials (the verifier could not judge them, so they
    leave training) gets a `warning:` line in the run's log and on the console."""


class HarnessEntry(Section):
    """One harness of a mixed-harness run (`[[agent.mix]]`)."""

    name: str
    """A registered scaffold or `module:Class`, as `agent.name`."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options passed to this scaffold's constructor."""
    weight: float = Field(1.0, gt=0.0)
    """Its share of the trials (weights are normalised over the mix)."""
    label: str | None = None
    """How trial results and metrics name it (None: `name`); two entries of one scaffold need two labels."""


class AgentSection(Section):
    """The scaffold (agent harness) each trial runs."""

    name: str = "builtin"
    """A registered scaffold (builtin, oracle, nop, mini-swe-agent, claude-code, opencode, codex, qwen-code) or
    `module:Class`."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the scaffold's constructor (e.g. builtin: `tools`, `system_prompt`, `examples`)."""
    mix: list[HarnessEntry] = Field(default_factory=list)
    """Several harnesses in one run, each `{name, kwargs, weight}` (`[[agent.mix]]` tables); when set it replaces
    `name`/`kwargs`. Every trial runs one (its result records `harness`), a GRPO group's attempts are spread over
    them by weight, and the step metrics split pass rate and tokens by harness (`rollout/harness/<label>/*`)."""

    @model_validator(mode="after")
    def _labels_unique(self) -> AgentSection:
        labels = [h.label or h.name for h in self.mix]
        if len(set(labels)) != len(labels):
            raise ValueError(f"agent.mix: harness labels must differ, got {labels}: give entries of one scaffold "
                             "a `label` each")
        return self
    tool_parser: str = "hermes"
    """How the proxy reads tool calls out of the model's text: `hermes` or `qwen3_coder`."""
    timeout_sec: float | None = None
    """Wall-clock limit of the scaffold per trial. None: the task's `[agent] timeout_sec`."""
    command_timeout_sec: float = Field(60.0, gt=0.0)
    """Limit of one command the scaffold runs in the sandbox (killed after it, the output says so): an interactive
    program (`vim`, `cat` with no file) otherwise holds its trial, and a sync step, for this long."""
    pin_temperature: bool = True
    """Every model call of a trial samples at the run's temperature (`rollout.temperature`; validation's
    `trainer.val_temperature`), whatever the harness sends: Claude Code always sends 1.0, and the trainer scores
    the tokens at the run's temperature, so another one breaks rollout/trainer fidelity. False: the harness's own
    temperature is used. A pinned session counts the calls it changed in its `temperature_pinned` counter."""


class SandboxSection(Section):
    """Where each trial runs, and its verifier."""

    backend: str = "local"
    """`local` (bubblewrap), `docker`, `kubernetes`, or `module:Class` for your own Sandbox."""
    verifier_timeout_sec: float | None = None
    """Wall-clock limit of the verifier. None: the task's `[verifier] timeout_sec` (raise it on an overloaded machine)."""
    min_memory_mb: int | None = Field(None, ge=1)
    """Raise every trial's memory limit (the task's `[environment] memory_mb`) to at least this, in training,
    validation and `legorl eval --config` (the warm start's command replays keep the task's own). An agent that
    runs inside the sandbox (Claude Code, OpenCode, Codex, Qwen Code) counts against the task's limit, as in
    Harbor, and needs ~0.5-1 GB of its own: at the builtin sets' 512 MB OpenCode is sometimes killed (an
    `agent_error`, left out of training). None: each task's own limit."""
