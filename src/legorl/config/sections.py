"""The run config's sections: one pydantic model per component, each field with its docstring.

Each component takes its own section (`StepTrainer(algorithm, trainer)`, the worker from `agent` +
`sandbox` + `rollout`), so a section says what one part needs and nothing else. Field docstrings
are the reference: `docs/configuration.md` is generated from them (`python -m legorl.config.docs`).
Knob names follow the field (verl/slime): `train_batch_size`, `n_resp_per_prompt`, `adv_estimator`...
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from legorl.models.store import DEFAULT_MODEL


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


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


class ModelSection(Section):
    """The policy model."""

    path: str = DEFAULT_MODEL
    """A registered model name (`legorl models list`) or a local Hugging Face model directory."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30% more compute."""
    enable_r3: bool | None = None
    """R3 routing replay (MoE): replay the experts chosen at generation in the training forward. None: on exactly when the model is MoE."""


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


class AgentSection(Section):
    """The scaffold (agent harness) each trial runs."""

    name: str = "builtin"
    """A registered scaffold (builtin, oracle, nop, mini-swe-agent, claude-code, opencode, ...) or `module:Class`."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the scaffold's constructor (e.g. builtin: `tools`, `system_prompt`, `examples`)."""
    tool_parser: str = "hermes"
    """How the proxy reads tool calls out of the model's text: `hermes` or `qwen3_coder`."""
    timeout_sec: float | None = None
    """Wall-clock limit of the scaffold per trial. None: the task's `[agent] timeout_sec`."""
    command_timeout_sec: float = Field(60.0, gt=0.0)
    """Limit of one command the scaffold runs in the sandbox (killed after it, the output says so): an interactive
    program (`vim`, `cat` with no file) otherwise holds its trial, and a sync step, for this long."""


class SandboxSection(Section):
    """Where each trial runs, and its verifier."""

    backend: str = "local"
    """`local` (bubblewrap), `docker`, `kubernetes`, or `module:Class` for your own Sandbox."""
    verifier_timeout_sec: float | None = None
    """Wall-clock limit of the verifier. None: the task's `[verifier] timeout_sec` (raise it on an overloaded machine)."""


class SchedulerSection(Section):
    """The session-level admission gate: protects prefix caches under KV pressure (opt-in)."""

    enabled: bool = False
    """Admit model calls under a KV high watermark, preferring sessions whose prefix is resident."""
    high_watermark: float = Field(0.85, gt=0.0, le=1.0)
    """KV usage above which new sessions wait."""
    hit_threshold: float = Field(0.80, ge=0.0, le=1.0)
    """Share of a prompt already cached that counts as prefix-resident (admitted first)."""
    wait_poll_sec: float = Field(5.0, gt=0.0)
    """How often waiting calls re-check admission (floored at 5 s)."""
    idle_grace_sec: float = Field(60.0, ge=0.0)
    """How long an idle session keeps its reservation between turns."""
    max_wait_sec: float | None = Field(None, gt=0.0)
    """Admit anyway after this wait. None: wait until admitted."""
    preempt_superseded: bool = True
    """A retry of the same call supersedes the waiting original."""
    attempt_overlap: float = Field(0.9, gt=0.0, le=1.0)
    """Shared-prefix share that makes a call a retry of a waiting one."""
    count_pending: bool = True
    """Count admitted-but-unstarted work and idle reservations in the KV-usage probe."""

    def scheduler_config(self):
        """The serving layer's `SchedulerConfig`, or None when the gate is off."""
        if not self.enabled:
            return None
        from legorl.serving.admission import SchedulerConfig

        return SchedulerConfig(
            self.high_watermark, self.hit_threshold, max(self.wait_poll_sec, 5.0), self.idle_grace_sec,
            self.max_wait_sec, self.preempt_superseded, self.attempt_overlap, self.count_pending,
        ).floored()


class VLLMSection(Section):
    """`serving.engine = "vllm"`: one `vllm serve` per replica, started by legorl or attached by URL (docs/vllm.md)."""

    executable: str | None = None
    """The `vllm` executable. None: `$LEGORL_VLLM`, `./.venv-vllm/bin/vllm`, then PATH."""
    urls: list[str] = Field(default_factory=list)
    """Attach to running servers instead of starting them (one URL per replica)."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Serving dtype (float32 matches the CPU trainer's logprobs)."""
    kv_cache_gib: int = Field(2, ge=1)
    """CPU build: KV cache GiB per server."""
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    """GPU build: share of GPU memory vLLM may take. None: vLLM's default."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs per replica."""
    enforce_eager: bool = True
    """No graph capture: ~25 s start on CPU instead of ~150 s."""
    extra_args: list[str] = Field(default_factory=list)
    """Appended to `vllm serve`."""
    startup_timeout_sec: float = Field(600.0, gt=0.0)
    """How long a server may take to answer /health."""
    weights_dir: str | None = None
    """Where weight versions are written for reload. None: /dev/shm."""


class ProxySection(Section):
    """Limits of the OpenAI/Anthropic proxy in front of the engines (docs/limits.md); `legorl serve --config` reads it too."""

    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    """Largest request body, as sent and once decoded (gzip/deflate): over it, a 413."""
    large_body_bytes: int = Field(256 * 1024, ge=1024)
    """Bodies over this (and every compressed one) are parsed and tokenized on a worker thread, a few at a time."""
    max_concurrent_large_bodies: int = Field(2, ge=1)
    """Large bodies read, parsed and tokenized at once; others wait (tokenizing costs ~400 B of RAM per token)."""
    default_max_tokens: int = Field(1024, ge=1)
    """Output cap of a call that sends no `max_tokens` (or null), at most the room left in the context window."""
    session_idle_ttl_sec: float | None = Field(3600.0, gt=0.0)
    """Sessions opened over HTTP (`POST /sessions`, bare routes) idle this long are closed. None: never."""
    max_sessions: int = Field(4096, ge=1)
    """Open sessions beyond which `POST /sessions` and bare-route calls get a 429 (trial sessions are not refused)."""


class ServingSection(Section):
    """The inference replicas, the load balancer in front of them and the admission gate."""

    engine: Literal["embedded", "vllm"] = "embedded"
    """`embedded`: legorl's in-process torch engine; `vllm`: supervised vLLM servers (`[serving.vllm]`)."""
    n_replicas: int = Field(1, ge=1)
    """Inference replicas behind the sticky load balancer."""
    kv_budget_tokens: int = Field(32768, ge=256)
    """Embedded engine: KV cache size per replica, in tokens (prefix cache and running requests share it)."""
    placement: Literal["thread", "process"] = "thread"
    """Embedded replicas: a thread each in this process, or one spawned child process each."""
    balancer: Literal["sticky", "round_robin"] = "sticky"
    """Session-sticky least-loaded routing, or round robin per call."""
    max_sticky_sessions: int = Field(100_000, ge=1)
    """LRU bound on session pins."""
    threads_per_replica: int | None = Field(None, ge=1)
    """Torch threads per embedded replica. None: (cores - 1) // n_replicas, at least 1: one core stays for the
    event loop, sandboxes and verifiers (on 2 cores the demo's rollout took 27.9 s with 1 engine thread, 36.3 s
    with 2)."""
    device: str = "auto"
    """Embedded engine: where the model and its KV cache live: `auto` (CUDA when present, else CPU), `cpu`,
    `cuda` or `cuda:N`. Sampling runs on the CPU either way."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Embedded engine: model and KV precision. Match `trainer.dtype` (preflight warns on a mismatch); on CPU
    bf16 is slower than fp32."""
    scheduler: SchedulerSection = SchedulerSection()
    """The session-level admission gate."""
    vllm: VLLMSection = VLLMSection()
    """vLLM replicas."""
    proxy: ProxySection = ProxySection()
    """The proxy's request, body and session limits."""


class AsyncTrainingSection(Section):
    """Fully-async training (docs/async.md): trials stream into a buffer while the trainer consumes it."""

    enabled: bool = False
    """Off: synchronous steps (roll out a batch, update, sync). On: rollouts and updates overlap."""
    staleness_threshold: int = Field(0, ge=0)
    """Weight versions a trained rollout may lag the actor."""
    trigger_parameter_sync_step: int = Field(1, ge=1)
    """Trainer updates between two weight syncs."""
    partial_rollout: bool | None = None
    """Resume generations a weight sync cut, under the new weights. None: on when async is enabled."""
    rollout_waves: bool = False
    """Start trials a whole batch at a time, the next batch once the previous one has finished (with
    staleness_threshold=1 and partial_rollout=false: the one-step-off pipeline, a baseline). Off: trials
    stream, a new group starting whenever a `rollout.concurrency` slot is free."""
    trainer_threads: int | None = Field(None, ge=0)
    """Torch threads of the update while in-process embedded engines keep generating beside it. None: the
    cores those engines leave (at least 1), so the two never oversubscribe the CPU; 0: every core, sharing
    the engines' (pays when the update, not the rollout, bounds the step: the async demo on 2 cores, step
    72 s -> 57 s, docs/async.md); N: N threads."""

    @property
    def partial_enabled(self) -> bool:
        return self.enabled if self.partial_rollout is None else self.partial_rollout


class RoleSection(Section):
    """Where one role's Ray actors go: the resources each actor asks for and how they spread over nodes."""

    num_cpus: float = Field(0.0, ge=0.0)
    """Logical CPUs each actor reserves (0: none; set it on a real cluster so Ray does not overpack a node)."""
    num_gpus: float = Field(0.0, ge=0.0)
    """GPUs each actor reserves (an engine replica or a trainer rank on a GPU node: 1)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each actor asks for, e.g. `{rollout = 1}` to keep the role on nodes started with
    `ray start --resources='{"rollout": 8}'`."""
    strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = "SPREAD"
    """The role's placement group strategy over its actors (one bundle per actor)."""


class ClusterSection(Section):
    """Placement of the run's roles (docs/cluster.md). `local`: everything in this process (and trainer ranks as
    its child processes). `ray`: every role is a Ray actor: `serving.n_replicas` engine replicas, `trainer.n_ranks`
    trainer ranks, `sandbox_hosts` hosts that run trials (their sandboxes and scaffolds), and one gateway (proxy,
    balancer, session scheduler) that scaffolds reach over HTTP; the driver only coordinates."""

    runtime: Literal["local", "ray"] = "local"
    """`local`: this process; `ray`: each role as Ray actors (docs/cluster.md)."""
    ray_address: str | None = None
    """An existing Ray cluster (`ray start --head` prints it). None: start a local Ray for the run (and stop it after)."""
    bind_host: str = "127.0.0.1"
    """Address the gateway's proxy listens on. Multi-node: `0.0.0.0` (scaffolds on other nodes reach it at its node's
    IP); the single-node default keeps it on loopback."""
    proxy_port: int = Field(0, ge=0, le=65535)
    """The gateway proxy's port (0: any free one; fix it when a firewall between nodes must let it through)."""
    sandbox_hosts: int = Field(1, ge=1)
    """AgentLoopWorker actors; a step's trials are spread over them (least loaded first)."""
    max_restarts: int = Field(3, ge=0)
    """How often Ray restarts a dead engine replica or sandbox host (a replica rejoins with the current weights)."""
    engines: RoleSection = RoleSection()
    """Engine replica actors."""
    trainer: RoleSection = RoleSection(strategy="PACK")
    """Trainer rank actors (one torch.distributed group: gloo on CPU, NCCL on GPU)."""
    hosts: RoleSection = RoleSection()
    """Sandbox host actors."""
    gateway: RoleSection = RoleSection()
    """The gateway actor (proxy + balancer + session scheduler)."""


class AlgorithmSection(Section):
    """The RL objective: advantages, policy loss, regularisers, off-policy correction."""

    adv_estimator: str = "grpo"
    """`grpo`, `rloo`, `gae` (needs a critic), or `module:function` for your own estimator."""
    n_resp_per_prompt: int = Field(4, ge=1)
    """Trials per task in a step: a GRPO/RLOO group."""
    filter_groups: bool = False
    """Leave groups whose rewards are all equal (zero advantage) out of the update, as DAPO's dynamic sampling
    does but without resampling: they carry no signal, yet dilute the token-mean loss of the groups that do and
    cost a forward/backward. A step with no mixed group makes no optimizer step. The logprob gate then covers
    the rows trained on. GRPO/RLOO (any group estimator); a `kl_coef` / `entropy_coef` term leaves with them."""
    norm_adv_by_std: bool = True
    """GRPO: divide advantages by the group's reward std."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """GAE discount."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda."""
    policy_loss_mode: str = "ppo"
    """`ppo` (token-level clipped ratio), `gspo` (sequence-level), or `module:function` for your own loss."""
    clip_ratio_low: float = Field(0.2, ge=0.0)
    """PPO lower clip: ratio >= 1 - clip_ratio_low."""
    clip_ratio_high: float = Field(0.28, ge=0.0)
    """PPO upper clip (clip-higher): ratio <= 1 + clip_ratio_high."""
    clip_ratio_c: float = Field(3.0, gt=1.0)
    """Dual-clip bound for negative advantages."""
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """How token losses aggregate over the batch."""
    kl_coef: float = Field(0.0, ge=0.0)
    """KL penalty against the frozen initial policy (0: no reference model is loaded)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus."""
    rollout_is: Literal["none", "token", "sequence", "masked"] = "none"
    """Importance weights pi_proximal / pi_behaviour for the rollout/trainer gap and stale data (async: `token`
    unless set): `token` / `sequence` truncate the token / sequence ratio at `rollout_is_threshold`; `masked`
    keeps each token's untruncated ratio but drops (weight 0) tokens whose ratio leaves
    [`rollout_is_low`, `rollout_is_threshold`] (docs/async.md: Off-policy corrections)."""
    rollout_is_threshold: float = Field(2.0, gt=0.0)
    """Upper truncation (`token`, `sequence`) or upper mask bound (`masked`) of the importance weights."""
    rollout_is_low: float = Field(0.5, ge=0.0)
    """`masked`: lower bound; tokens whose ratio falls below it get weight 0."""
    rollout_rs: Literal["none", "token", "geometric"] = "none"
    """Rejection of off-policy data, applied to the loss mask (rejected tokens leave the loss and its
    normalisation): `token` drops tokens whose ratio leaves [`rollout_rs_low`, `rollout_rs_high`] (two-sided,
    IcePop-style); `geometric` drops whole rollouts whose geometric-mean token ratio leaves that range."""
    rollout_rs_low: float = Field(0.5, ge=0.0)
    """Lower bound of the accepted ratio for `rollout_rs` (token ratio, or geometric mean per rollout)."""
    rollout_rs_high: float = Field(2.0, gt=0.0)
    """Upper bound of the accepted ratio for `rollout_rs`."""
    ppo_anchor: Literal["proximal", "behaviour"] = "proximal"
    """What the clipped PPO ratio is taken against. `proximal`: the decoupled objective (three policies): the
    trainer's logprobs before this update, with the behaviour gap left to `rollout_is` / `rollout_rs`.
    `behaviour`: coupled PPO: the rollout's own logprobs (on stale data the trust region then sits around the
    stale policy and many tokens clip); `rollout_is` must then stay `none`."""


class TrainerSection(Section):
    """The optimisation schedule, validation and checkpoints."""

    train_batch_size: int = Field(4, ge=1)
    """Tasks per step (each runs `n_resp_per_prompt` trials)."""
    total_steps: int = Field(10, ge=1)
    """Training steps."""
    lr: float = Field(1e-6, gt=0.0)
    """AdamW learning rate."""
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after warm-up."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradient clipping norm (a non-finite norm skips the step)."""
    micro_batch_size: int = Field(2, ge=1)
    """Rollouts per forward/backward."""
    ppo_epochs: int = Field(1, ge=1)
    """Passes over a batch per step."""
    critic_lr: float = Field(1e-5, gt=0.0)
    """GAE: the critic's learning rate."""
    save_freq: int = Field(0, ge=0)
    """Checkpoint every N steps (0: only at the end)."""
    max_checkpoints_to_keep: int | None = Field(None, ge=1)
    """Keep only the newest N checkpoints, deleting older ones after each save (None: keep all). A SmolLM2
    checkpoint with its optimizer state is ~1.6 GB; `--resume` needs only the newest."""
    test_freq: int = Field(0, ge=0)
    """Validate every N steps and at the end (0: never)."""
    val_before_train: bool = False
    """Validate once before the first step."""
    val_n: int = Field(1, ge=1)
    """Attempts per held-out task at validation."""
    val_temperature: float | None = Field(None, ge=0.0)
    """Sampling temperature at validation. None: the rollout temperature."""
    max_logprob_abs_diff: float | None = Field(None, gt=0.0)
    """Refuse a batch whose mean rollout/trainer logprob gap exceeds this (loosen it in async)."""
    device: str = "auto"
    """Where the trainer computes: `auto` (CUDA when present, else CPU), `cpu`, `cuda` or `cuda:N`."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Compute precision. bfloat16 keeps fp32 master weights and optimizer state (autocast in one process,
    FSDP2 MixedPrecisionPolicy across ranks); logprobs and losses stay fp32."""
    n_ranks: int = Field(1, ge=1)
    """Trainer processes (`legorl train --nproc N`): N > 1 starts N ranks under torch.distributed (gloo on
    CPU, NCCL on GPU), FSDP2 shards the model and each rank trains on its share of the batch."""
    max_tokens_per_micro_batch: int | None = Field(None, ge=1)
    """Pack micro-batches by this token budget (rows x longest row), longest rows first, instead of
    `micro_batch_size` rows each. None: fixed micro-batches."""
    fuse_old_logprob_pass: bool = True
    """Steps with one epoch, `ppo_anchor = "proximal"`, no `rollout_rs` rejection and no R3 take the old
    (proximal) logprobs from the gradient pass instead of a separate forward, sync or async, with or without
    `rollout_is` weights (computed per micro-batch from them): the same update, one forward fewer."""
    cpu_offload: bool = False
    """With `n_ranks` > 1: FSDP2 keeps parameters, gradients and optimizer state on the CPU between uses."""
    weight_bucket_mb: int = Field(256, ge=1)
    """Weight sync streams the gathered weights in buckets of about this many MiB."""


class WarmStartSection(Section):
    """A supervised warm start before RL: SFT on demonstrations so a model that never solves a task (its
    GRPO groups all score 0: no signal) starts from one that sometimes does. Made once per run
    (`<run>/warm_start/model`); the trainer and the engines start from it."""

    enabled: bool = False
    """Run the warm start before the first step (validation before training then measures its result)."""
    data: str = "task-demonstrations"
    """`task-demonstrations`: each training task's `solution/demonstration.json` (`{"commands": [...]}`, one per
    turn) replayed in a fresh sandbox through the builtin scaffold (text protocol), kept when the verifier
    gives 1; held-out tasks are never used. Or a JSONL file of `{"messages": [...]}` chat transcripts."""
    task_fraction: float = Field(1.0, gt=0.0, le=1.0)
    """`task-demonstrations`: the share of the training tasks whose demonstrations are replayed (per
    `tasks.stratify_by` value when set). Below 1 the RL steps sample only the other tasks: a task the warm
    start trained on is solved in every trial of its group (zero advantage), so RL learns from unseen ones."""
    epochs: int = Field(2, ge=1)
    """Passes over the demonstrations."""
    lr: float = Field(2e-5, gt=0.0)
    """AdamW learning rate (constant)."""
    batch_size: int = Field(4, ge=1)
    """Transcripts per optimizer step (loss: mean NLL over their assistant tokens)."""


class RunConfig(Section):
    """One run: every component's section. Build it with `legorl.config.load_config`."""

    run: RunSection = RunSection()
    model: ModelSection = ModelSection()
    tasks: TasksSection = TasksSection()
    rollout: RolloutSection = RolloutSection()
    agent: AgentSection = AgentSection()
    sandbox: SandboxSection = SandboxSection()
    serving: ServingSection = ServingSection()
    async_training: AsyncTrainingSection = AsyncTrainingSection()
    cluster: ClusterSection = ClusterSection()
    algorithm: AlgorithmSection = AlgorithmSection()
    trainer: TrainerSection = TrainerSection()
    warm_start: WarmStartSection = WarmStartSection()

    def effective_rollout_is(self) -> str:
        """Async trains on data from older weights: token-level IS unless `rollout_is` was set explicitly."""
        a = self.algorithm
        if self.async_training.enabled and "rollout_is" not in a.model_fields_set and a.ppo_anchor == "proximal":
            return "token"
        return self.algorithm.rollout_is

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        algo, asyn, vllm = self.algorithm, self.async_training, self.serving.vllm
        problems = []
        if algo.adv_estimator in ("grpo", "rloo") and algo.n_resp_per_prompt < 2:
            problems.append(
                f"algorithm.n_resp_per_prompt={algo.n_resp_per_prompt} with adv_estimator={algo.adv_estimator!r}: "
                "group baselines need at least 2 responses per prompt"
            )
        if algo.filter_groups and algo.adv_estimator == "gae":
            problems.append("algorithm.filter_groups=true needs a group estimator (grpo, rloo): gae has no groups")
        if self.warm_start.task_fraction < 1 and self.warm_start.data != "task-demonstrations":
            problems.append("warm_start.task_fraction < 1 splits the training tasks' demonstrations: it needs "
                            "warm_start.data = 'task-demonstrations'")
        if ":" not in algo.adv_estimator and algo.adv_estimator not in ("grpo", "rloo", "gae"):
            problems.append(f"algorithm.adv_estimator={algo.adv_estimator!r}: use grpo, rloo, gae or 'module:function'")
        if ":" not in algo.policy_loss_mode and algo.policy_loss_mode not in ("ppo", "gspo"):
            problems.append(f"algorithm.policy_loss_mode={algo.policy_loss_mode!r}: use ppo, gspo or 'module:function'")
        if asyn.partial_rollout and not asyn.enabled:
            problems.append("async_training.partial_rollout=true needs async_training.enabled=true")
        if asyn.rollout_waves and not asyn.enabled:
            problems.append("async_training.rollout_waves=true needs async_training.enabled=true")
        if not asyn.enabled and asyn.staleness_threshold:
            problems.append("async_training.staleness_threshold only applies with async_training.enabled=true")
        k = asyn.trigger_parameter_sync_step
        if not asyn.enabled and k != 1:
            problems.append("async_training.trigger_parameter_sync_step only applies with async_training.enabled=true")
        if asyn.enabled and asyn.staleness_threshold < k - 1:
            problems.append(
                f"async_training.trigger_parameter_sync_step={k} trains up to {k - 1} updates on one weight "
                f"version: async_training.staleness_threshold must be >= {k - 1} (got {asyn.staleness_threshold})"
            )
        if self.cluster.runtime == "local":
            default = ClusterSection()  # not fields_set: a config dumped and loaded again has every field set
            set_ = [k for k in ("ray_address", "bind_host", "proxy_port", "sandbox_hosts", "engines", "trainer",
                                "hosts", "gateway") if getattr(self.cluster, k) != getattr(default, k)]
            if set_:
                problems.append(f"cluster.{set_[0]} only applies with cluster.runtime='ray' (docs/cluster.md)")
        engine, replicas = self.serving.engine, self.serving.n_replicas
        if vllm.urls and engine != "vllm":
            problems.append("serving.vllm.urls is set but serving.engine is not 'vllm'")
        if vllm.urls and len(vllm.urls) != replicas:
            problems.append(f"serving.vllm.urls lists {len(vllm.urls)} server(s) but serving.n_replicas="
                            f"{replicas}: give one URL per replica")
        if engine == "vllm" and self.serving.placement == "process":
            problems.append("serving.placement='process' is for embedded replicas; vLLM replicas are processes already")
        if algo.ppo_anchor == "behaviour" and algo.rollout_is != "none":
            problems.append(f"algorithm.ppo_anchor='behaviour' already takes the ratio against the behaviour "
                            f"logprobs: algorithm.rollout_is={algo.rollout_is!r} would correct twice (use 'none')")
        if algo.rollout_is == "masked" and algo.rollout_is_low >= algo.rollout_is_threshold:
            problems.append("algorithm.rollout_is='masked' needs rollout_is_low < rollout_is_threshold")
        if algo.rollout_rs != "none" and algo.rollout_rs_low >= algo.rollout_rs_high:
            problems.append("algorithm.rollout_rs needs rollout_rs_low < rollout_rs_high")
        if algo.policy_loss_mode == "gspo" and max(algo.clip_ratio_low, algo.clip_ratio_high) > 0.01:
            problems.append(
                "algorithm.policy_loss_mode='gspo' clips the length-normalized sequence ratio: use clip ratios "
                "around 3e-4..4e-4 (got clip_ratio_low/high = "
                f"{algo.clip_ratio_low}/{algo.clip_ratio_high})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self
