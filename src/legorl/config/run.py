"""One run's whole config: every component's section, and the combinations refused at load."""

from __future__ import annotations

from pydantic import model_validator

from legorl.config.base import Section
from legorl.config.cluster import ClusterSection
from legorl.config.serving import ServingSection
from legorl.config.training import AlgorithmSection, AsyncTrainingSection, TrainerSection, WarmStartSection
from legorl.config.trials import (
    AgentSection,
    ModelSection,
    RolloutSection,
    RunSection,
    SandboxSection,
    TasksSection,
)


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

    def engines_serve_trainer_model(self) -> bool:
        """`serving.share_trainer_model` applies: the embedded thread replicas can serve the trainer's model object
        (one process, one trainer rank, synchronous steps, fp32 weights where the trainer keeps them, no LoRA).
        An MoE model still gets its own copy (the engine records routing on it; train/loop.py)."""
        s = self.serving
        return (s.share_trainer_model and s.engine == "embedded" and s.placement == "thread" and s.dtype == "float32"
                and s.device == self.trainer.device and self.cluster.runtime == "local" and self.trainer.n_ranks == 1
                and not self.async_training.enabled and self.model.lora.rank == 0)

    @model_validator(mode="after")
    def _combinations(self) -> RunConfig:
        algo, asyn, vllm = self.algorithm, self.async_training, self.serving.vllm
        problems = []
        if algo.adv_estimator in ("grpo", "rloo") and algo.n_resp_per_prompt < 2:
            problems.append(
                f"algorithm.n_resp_per_prompt={algo.n_resp_per_prompt} with adv_estimator={algo.adv_estimator!r}: "
                "group baselines need at least 2 responses per prompt"
            )
        if algo.overlong_buffer >= self.rollout.max_response_len:
            problems.append(f"algorithm.overlong_buffer={algo.overlong_buffer} must be below rollout.max_response_len="
                            f"{self.rollout.max_response_len}: the penalty starts that many tokens before the cap")
        if algo.filter_groups and algo.adv_estimator == "gae":
            problems.append("algorithm.filter_groups=true needs a group estimator (grpo, rloo): gae has no groups")
        if self.warm_start.task_fraction < 1 and self.warm_start.data != "task-demonstrations":
            problems.append("warm_start.task_fraction < 1 splits the training tasks' demonstrations: it needs "
                            "warm_start.data = 'task-demonstrations'")
        ws_key, tasks_key = self.warm_start.stratify_by, self.tasks.stratify_by
        if ws_key is not None and self.warm_start.task_fraction >= 1:
            problems.append(f"warm_start.stratify_by={ws_key!r} splits the training tasks by "
                            "warm_start.task_fraction: set task_fraction < 1 (at 1 every task is demonstrated)")
        if (by := self.warm_start.demonstrate_by) is not None:
            if self.warm_start.task_fraction >= 1:
                problems.append(f"warm_start.demonstrate_by={by!r} demonstrates task_fraction of its values: set "
                                "task_fraction < 1 (at 1 every value is demonstrated and none is left to RL)")
            if ws_key is not None:
                problems.append(f"warm_start.demonstrate_by={by!r} and warm_start.stratify_by={ws_key!r}: set one "
                                "(whole values demonstrated, or a share of each value)")
        if self.warm_start.rl_nll_coef > 0 and not self.warm_start.enabled:
            problems.append("warm_start.rl_nll_coef > 0 replays the warm start's demonstrations during RL: it needs "
                            "warm_start.enabled = true")
        if ws_key is not None and tasks_key is not None and ws_key != tasks_key:
            problems.append(f"warm_start.stratify_by={ws_key!r} and tasks.stratify_by={tasks_key!r}: the warm start "
                            "would follow two keys; set one (warm_start follows tasks.stratify_by when its own is unset)")
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
                                "hosts", "gateway", "weight_transport", "weight_delta") if getattr(self.cluster, k) != getattr(default, k)]
            if set_:
                problems.append(f"cluster.{set_[0]} only applies with cluster.runtime='ray' (docs/cluster.md)")
        engine, replicas = self.serving.engine, self.serving.n_replicas
        if self.cluster.weight_transport == "collective" and engine != "embedded":
            problems.append("cluster.weight_transport='collective' sends buckets to embedded replicas; vLLM replicas "
                            "take weights through cluster.weight_transport='object_store'")
        if self.cluster.weight_delta:
            if self.cluster.weight_transport != "collective":
                problems.append("cluster.weight_delta=true needs cluster.weight_transport='collective'")
            if self.model.lora.enabled:
                problems.append("cluster.weight_delta=true sends full weights' deltas; a LoRA run (model.lora.rank "
                                "> 0) sends only the adapter already")
        if vllm.urls and engine != "vllm":
            problems.append("serving.vllm.urls is set but serving.engine is not 'vllm'")
        if vllm.urls and len(vllm.urls) != replicas:
            problems.append(f"serving.vllm.urls lists {len(vllm.urls)} server(s) but serving.n_replicas="
                            f"{replicas}: give one URL per replica")
        if self.model.gradient_checkpointing == "long_rows":
            if not self.trainer.max_tokens_per_micro_batch:
                problems.append("model.gradient_checkpointing='long_rows' recomputes micro-batches over the token "
                                "budget: set trainer.max_tokens_per_micro_batch")
            if self.trainer.n_ranks > 1:  # a recompute re-gathers FSDP shards: every rank must do the same
                problems.append("model.gradient_checkpointing='long_rows' decides per micro-batch, and FSDP ranks hold "
                                "different ones: use true or false with trainer.n_ranks > 1")
        if self.serving.free_kv_during_update:
            if engine != "embedded" or self.cluster.runtime != "local":
                problems.append("serving.free_kv_during_update=true frees embedded replicas' KV pools in this run's "
                                "processes: it needs serving.engine='embedded' and cluster.runtime='local'")
            if asyn.enabled:
                problems.append("serving.free_kv_during_update=true frees the KV pools while the trainer updates: the "
                                "replicas generate through the update with async_training.enabled=true")
        if engine == "vllm" and self.serving.placement == "process":
            problems.append("serving.placement='process' is for embedded replicas; vLLM replicas are processes already")
        if self.model.lora.enabled and engine == "vllm" and self.model.lora.rank > 512:
            problems.append(f"model.lora.rank={self.model.lora.rank}: vLLM serves adapters up to rank 512")
        if self.model.lora.enabled and engine == "vllm" and vllm.weight_transport == "collective":
            problems.append("serving.vllm.weight_transport='collective' sends whole weights; a LoRA run syncs only its "
                            "adapter (a few MB, as a PEFT directory): use the default 'files'")
        if engine == "remote":
            if not self.model.lora.enabled:
                problems.append("serving.engine='remote' shares a server's base model: it needs model.lora.rank > 0 "
                                "(only the run's adapter goes to the server)")
            if not self.serving.remote.url:
                problems.append("serving.engine='remote' needs serving.remote.url (the URL `legorl serve "
                                "--engine-api` prints)")
            if replicas != 1 or self.cluster.runtime != "local":
                problems.append("serving.engine='remote' is one server: serving.n_replicas=1, cluster.runtime='local'")
        elif self.serving.remote.url:
            problems.append("serving.remote.url is set but serving.engine is not 'remote'")
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
