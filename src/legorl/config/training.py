"""The learning side's sections: the RL objective, the trainer's schedule, fully-async training, the warm start."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from legorl.config.base import Section


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
    overlong_buffer: int = Field(0, ge=0)
    """DAPO's soft overlong punishment (train/overlong.py): a trial whose longest model call sampled more than
    `rollout.max_response_len` - this many tokens loses reward linearly, up to `overlong_penalty` for a call cut at
    the cap. A block cut at the cap still runs, so without it a policy can learn to fill every turn with guesses.
    Only the update's reward is shaped (before `filter_groups`); pass rates, the task sampler and validation keep
    the verifier's. 0: off."""
    overlong_penalty: float = Field(1.0, ge=0.0)
    """The reward a call cut at the cap loses under `overlong_buffer`."""
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
    ppo_mini_batch_size: int | None = Field(None, ge=1)
    """Groups (tasks, with their `n_resp_per_prompt` trials) per optimizer step, as verl's mini-batches: a step's
    batch (after `filter_groups`) splits into ceil(groups / this) optimizer steps per epoch, in the batch's order,
    each a token-mean over its own rows. More, smaller steps per batch of rollouts; each after the first sits
    off the proximal policy, which the PPO clip bounds. None: one optimizer step per epoch (the whole batch).
    With more than one mini-batch the old logprobs take a separate forward (the fused pass needs one step)."""
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
    share_prefix: bool = True
    """Forward the longest common token prefix of a group's rows once per micro-batch (and a prefix all its rows
    share, like a system prompt, once) and let every row's continuation attend to it: the same loss and
    gradients as the unshared rows (to fp32 rounding), fewer tokens computed (the demo's 32 rows x ~156 tokens
    hold ~1,800 distinct ones). A group's rows stay in one micro-batch (`micro_batch_size` rows, or
    `max_tokens_per_micro_batch` counting each shared prefix once) and on one rank; under R3 a shared token
    must also have the same recorded routing in every row."""
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
    `warm_start.stratify_by`, else `tasks.stratify_by`, value when set). Below 1 the RL steps sample only the
    other tasks: a task the warm start trained on is solved in every trial of its group (zero advantage), so RL
    learns from unseen ones."""
    stratify_by: str | None = None
    """`task-demonstrations` with `task_fraction` < 1: a `task.toml` [metadata] key (e.g. `kind`); the warm
    start takes `task_fraction` of each value's training tasks, at least one of every value with two or more
    (chosen among those that ship a demonstration), so every training kind is demonstrated; the rest go to RL.
    The one way to a per-kind warm start beside `tasks.holdout_by` (held-out values are never demonstrated).
    None: `tasks.stratify_by`'s split when set, else one split over all training tasks."""
    demonstrate_by: str | None = None
    """`task-demonstrations` with `task_fraction` < 1: a `task.toml` [metadata] key (e.g. `kind`); the warm
    start demonstrates every training task (that ships a demonstration) of `task_fraction` of the key's values,
    and the RL steps sample only the other values' tasks: RL then practises the step to kinds no demonstration
    showed, which is what validation with `tasks.holdout_by` measures. Exclusive with `stratify_by`."""
    epochs: int = Field(2, ge=1)
    """Passes over the demonstrations."""
    lr: float = Field(2e-5, gt=0.0)
    """AdamW learning rate (the peak, under `lr_scheduler`)."""
    lr_scheduler: Literal["constant", "cosine", "linear"] = "constant"
    """After warm-up: `constant`, or a decay that reaches 0 after the last optimizer step (as `trainer.
    lr_scheduler`). A decaying rate ends at a point that depends less on the last batches' order
    (docs/agent-lookact.md)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up optimizer steps (an epoch is ceil(transcripts / batch_size) steps)."""
    batch_size: int = Field(4, ge=1)
    """Transcripts per optimizer step (loss: mean NLL over their assistant tokens)."""
    seed: int | None = None
    """The fine-tune's seed (the demonstrations' order each epoch, torch's generator); None: `run.seed`. Fix it to
    draw several RL runs (`run.seed`) from one warm start: with `cache` they fine-tune once."""
    cache: bool = True
    """Reuse a warm start fine-tuned before on this machine from the same inputs (`$LEGORL_HOME/warm_starts`, the
    newest 4 kept): the key hashes the base model's files, the encoded demonstrations, `epochs`, `lr`,
    `lr_scheduler`, `warmup_steps`, `batch_size`, the seed (`seed`), `model.gradient_checkpointing` and the torch /
    transformers versions, so a hit is the same computation. Runs that change only RL settings then skip the
    fine-tune (step 0 logs `warm_start/cached` 1). Set false to time a first run or to measure the SFT."""
    rl_nll_coef: float = Field(0.0, ge=0.0)
    """Keep training on the demonstrations during RL: every optimizer step adds this times the mean NLL of
    `rl_nll_batch` of the warm start's transcripts (a seeded cycle through them) to the policy loss, as
    InstructGPT's PPO-ptx mixes pretraining data in. RL on some kinds moves weights every kind shares; what the
    demonstrations taught for kinds RL never samples can drift (docs/agent-lookact.md). Logged as
    `actor/demo_nll`. 0: off."""
    rl_nll_batch: int = Field(8, ge=1)
    """Demonstrations per RL optimizer step under `rl_nll_coef`."""


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
