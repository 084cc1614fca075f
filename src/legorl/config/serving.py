"""The inference side's sections: engines and replicas, the session scheduler, vLLM, the proxy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from legorl.config.base import Section


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
    weight_transport: Literal["files", "collective"] = "files"
    """How weights reach the servers. `files`: safetensors in `weights_dir`, reloaded by each server. `collective`:
    over a gloo pair group (NCCL on GPUs, untested) straight into each server's worker, no files (docs/vllm.md); a
    failed sync is followed by a full reload from files."""
    weight_sync_timeout_s: float = Field(60.0, gt=0.0)
    """With `weight_transport = "collective"`: the bound on forming a server's group and on each bucket's transfer."""


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


class RemoteSection(Section):
    """`serving.engine = "remote"`: this run samples from a running `legorl serve --engine-api` shared with other
    runs, with a LoRA adapter of its own; only that adapter is pushed at each sync (docs/lora.md)."""

    url: str = ""
    """The server's URL, as `legorl serve` prints it (`http://HOST:PORT`)."""
    adapter: str = ""
    """The adapter name this run loads and samples with on the server. Empty: the run's name. Two runs on one
    server need different names."""
    timeout_sec: float = Field(600.0, gt=0.0)
    """Per call to the server (a generation, a logprob pass, an adapter load)."""


class ServingSection(Section):
    """The inference replicas, the load balancer in front of them and the admission gate."""

    engine: Literal["embedded", "vllm", "remote"] = "embedded"
    """`embedded`: legorl's in-process torch engine; `vllm`: supervised vLLM servers (`[serving.vllm]`); `remote`:
    a shared `legorl serve` with this run's LoRA adapter on it (`[serving.remote]`, needs `model.lora`)."""
    n_replicas: int = Field(1, ge=1)
    """Inference replicas behind the sticky load balancer. Embedded thread replicas of a dense model without LoRA
    serve one copy of the weights: on 2 cores, two 1-thread replicas sample ~1.4x the tokens/s of one."""
    kv_budget_tokens: int = Field(32768, ge=256)
    """Embedded engine: KV cache size per replica, in tokens (prefix cache and running requests share it)."""
    placement: Literal["thread", "process"] = "thread"
    """Embedded replicas: a thread each in this process, or one spawned child process each."""
    balancer: Literal["sticky", "round_robin"] = "sticky"
    """Session-sticky least-loaded routing, or round robin per call."""
    max_sticky_sessions: int = Field(100_000, ge=1)
    """LRU bound on session pins."""
    affinity_slack: int = Field(4, ge=0)
    """A new session whose first prompt a recent session had (a GRPO group's trials) goes to that session's replica
    while it has at most this many more calls in flight than the least loaded one, so the prompt is prefilled
    once; 0: always the least loaded."""
    share_trainer_model: bool = True
    """A synchronous run in this process (one trainer rank, thread replicas, fp32, no LoRA, a dense model): the
    replicas serve the trainer's own model object, so the run holds one copy of the weights, not two, and a weight
    sync copies nothing. The engines generate only between updates, so they never see a half-updated model."""
    free_kv_during_update: bool = False
    """A synchronous run with embedded replicas: each replica gives its KV pool's memory back for the trainer's
    update and allocates it afresh before the next rollout (the weight sync drops its prefix cache anyway), as
    vLLM's sleep mode frees the KV cache for colocated training. The update's peak drops by the pools
    (`n_replicas` x `kv_budget_tokens` x the model's KV bytes a token), room for the update without
    `model.gradient_checkpointing` (~20% faster, `bench/update_memory.py`); `legorl preflight` costs the two
    phases apart."""
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
    decode_attention: Literal["auto", "kernel", "torch"] = "auto"
    """Embedded engine: how decode rows attend over the paged KV pool. `kernel`: a small C kernel built once per
    machine with the system compiler (~0.2 s, cached in $LEGORL_HOME/kernels) reads each row's K/V in place;
    `torch`: gather each row's blocks into a padded batch every layer (no compiler needed); `auto`: the kernel
    when it builds and the pool is fp32 on the CPU, else torch. 1.6-3x less attention time and ~1.2x a whole decode
    step of 14 rows on 2 cores (`bench/decode_attention.py`, docs/serving.md)."""
    decode_linear: Literal["auto", "kernel", "torch"] = "auto"
    """Embedded engine: the linear layers of a step of at most 64 tokens (decode rows and the prompt chunks beside
    them). `kernel`: a C kernel (built with the decode kernel; AVX2 + FMA) that streams each weight once with the
    next rows prefetched, 1.5-2x the BLAS GEMM at 1-14 rows and 1.1-1.2x at 16-64 on one core; `torch`: BLAS;
    `auto`: the kernel for a one-thread engine of fp32 weights on the CPU (thread replicas on 2 cores), else torch
    (`bench/skinny_linear.py`, docs/serving.md)."""
    scheduler: SchedulerSection = SchedulerSection()
    """The session-level admission gate."""
    vllm: VLLMSection = VLLMSection()
    """vLLM replicas."""
    remote: RemoteSection = RemoteSection()
    """A shared server (`serving.engine = "remote"`)."""
    proxy: ProxySection = ProxySection()
    """The proxy's request, body and session limits."""
    adapters: dict[str, str] = {}
    """`legorl serve --config`: named LoRA adapters served beside the base, name -> PEFT adapter directory (as
    `legorl export` writes it); a request picks one by its `model` field (docs/lora.md). Same as
    `--adapter NAME=DIR`."""
