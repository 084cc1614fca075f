"""Preflight: the run's peak resident memory, estimated from its config and the model's `config.json`
(no weights read), printed as one line with its parts:

    engine   weights (serving dtype) + the KV pool (`serving.kv_budget_tokens`, allocated whole; a
             long run touches every block, so it all becomes resident) per embedded replica; thread replicas
             share one copy of the weights, and in a synchronous run serve the trainer's (no copy)
    trainer  fp32 master weights + grads + AdamW's two moments (16 B/param; the fused step makes no
             temporaries), a tied embedding's backward transient (its dense gradient and the sum with the
             head's: two vocab x hidden buffers), a frozen reference when `algorithm.kl_coef` > 0, the critic
             for GAE
    act      saved activations of one micro-batch at its token budget (`trainer.max_tokens_per_micro_batch`,
             else `micro_batch_size` x the longest row), ~(11 H + 4 I) fp32 values per token and layer
             (a decoder layer's saved tensors under SDPA); with `model.gradient_checkpointing` only each
             layer's input plus one layer recomputed
    logits   the trainer's vocabulary head, `LOGITS_CHUNK` positions at a time (logits, log-softmax and
             their gradients)
    base     the interpreter, torch, the proxy, the workers and their trial records

With `serving.free_kv_during_update` the KV pools are freed for the update: its phase (`update`) holds no KV, and
the rollout's (`rollout`) holds the pools and the trainer's state but no activations.

The warm start (`[warm_start]`) runs before the engines start: its own weights + grads + AdamW +
activations at its batch. The peak is the larger of the two phases (`legorl train` trims the heap between
them). Calibrated against `/usr/bin/time -v legorl train` on examples/agent.toml and demo.toml
(docs/agent.md, tests/ops/test_preflight_memory.py): within ~10% over a few steps there; whole 10-15-step agent runs
peaked 1.2-1.3x above it (an update transient of ~1 GB, mostly heap fragmentation under glibc's dynamic mmap
threshold; since `legorl train` fixes it at 1 MiB while an update runs, train/heap.py, agent-lookact's seed 3 peaked
at 5.47 GB against this estimate's 4.8). Fixed micro-batches
(no token budget) are costed at the longest row, so short rows (demo.toml) make it an upper bound. With
`[model.lora]` the trainer holds the frozen base in fp32 plus the adapter's weights, grads and AdamW state (each
replica its own engine copy); the warm start still fine-tunes every weight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from legorl.config import RunConfig
from legorl.ops.checks import CheckResult, ok, skip, warn

GB = 1e9
BASE_BYTES = 0.7 * GB  # python + torch + transformers + tokenizer + proxy/workers, measured ~0.6-0.8 GB
BLOCK_SIZE = 16  # the embedded engine's KV block
LOGITS_CHUNK = 256  # train/logprobs.py: positions per vocabulary-projection chunk
LOGITS_COPIES = 3  # logits, log-softmax, and the gradient flowing back through them
WARM_START_TOKENS_PER_ROW = 512  # a demonstration transcript (system prompt + 2-4 turns): ~250-450 tokens
WARM_START_ROW_ACT_BYTES = 1.0 * GB  # a warm-start forward fills rows up to this; a row over it alone is recomputed
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}


@dataclass(frozen=True)
class ModelDims:
    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    kv_heads: int
    head_dim: int
    tied: bool = False  # the input embedding is the output head's weight (`tie_word_embeddings`)
    moe: bool = False
    heads: int = 0  # query heads (0: hidden // head_dim)
    experts: int = 1

    @classmethod
    def from_config(cls, c: dict[str, Any]) -> ModelDims:
        """Dense decoder dims from a HF `config.json` (MoE: the experts count in `params`, one in activations)."""
        c = {**c, **(c.get("text_config") or {})}
        h, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
        heads = int(c["num_attention_heads"])
        kv = int(c.get("num_key_value_heads") or heads)
        hd = int(c.get("head_dim") or h // heads)
        inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * h)
        experts = int(c.get("num_experts") or c.get("num_local_experts") or 1)
        attn = h * heads * hd * 2 + h * kv * hd * 2
        mlp = 3 * h * inter * experts + (h * experts if experts > 1 else 0)
        embed = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
        params = layers * (attn + mlp + 2 * h) + embed + h
        tied = bool(c.get("tie_word_embeddings"))
        return cls(params, layers, h, inter, vocab, kv, hd, tied, experts > 1, heads, experts)

    def lora_linears(self, targets: list[str] | str) -> list[tuple[int, int, int]]:
        """(in, out, copies per layer) of each decoder Linear a LoRA adapter targets: `all-linear` is q/k/v/o and
        gate/up/down, each expert's own under MoE when its experts are Linears."""
        h, i, kv = self.hidden, self.intermediate, self.kv_heads * self.head_dim
        q = (self.heads or h // self.head_dim) * self.head_dim
        shapes = {"q_proj": (h, q, 1), "k_proj": (h, kv, 1), "v_proj": (h, kv, 1), "o_proj": (q, h, 1),
                  "gate_proj": (h, i, self.experts), "up_proj": (h, i, self.experts), "down_proj": (i, h, self.experts)}
        return [s for name, s in shapes.items() if targets == "all-linear" or name in targets]

    def lora_params(self, rank: int, targets: list[str] | str) -> int:
        """Parameters of a rank-`rank` adapter: r x (in + out) per targeted Linear."""
        return self.layers * sum(n * rank * (i + o) for i, o, n in self.lora_linears(targets))


@dataclass
class MemoryEstimate:
    """Bytes per part; `phases` maps a phase to the parts resident in it."""

    parts: dict[str, float]
    phases: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the parts leave out, and why

    def phase_total(self, phase: str) -> float:
        return sum(self.parts[p] for p in self.phases[phase])

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_total)

    @property
    def peak(self) -> float:
        return self.phase_total(self.peak_phase)

    def line(self) -> str:
        main = next(iter(self.phases))  # `rl`, or `update` when the KV pools are freed for it (then `rollout`)
        rl = " + ".join(f"{k} {self.parts[k] / GB:.2f}" for k in self.phases[main])
        text = f"peak RSS ~{self.peak / GB:.1f} GB ({self.peak_phase}): {main} {self.phase_total(main) / GB:.2f} = {rl}"
        if "rollout" in self.phases:
            text += f"; rollout {self.phase_total('rollout') / GB:.2f} GB (the KV pools back, no update)"
        if "warm start" in self.phases:
            text += f"; warm start {self.phase_total('warm start') / GB:.2f} GB before the engines start"
        return "; ".join([text, *self.notes])


def activation_bytes(d: ModelDims, tokens: int, checkpointing: bool) -> float:
    """Saved activations of a forward over `tokens` positions (fp32): ~(11 H + 4 I) values per token and
    layer (norm inputs/outputs, q/k/v/attention output under SDPA, the MLP's gate/up/product)."""
    per_layer = (11 * d.hidden + 4 * d.intermediate) * 4 * tokens
    if checkpointing:  # each layer's input kept, one layer's activations live during its recompute
        return d.layers * d.hidden * 4 * tokens + per_layer
    return d.layers * per_layer


def warm_start_recomputes(d: ModelDims, tokens: int, checkpointing: bool) -> bool:
    """Whether the warm start checkpoints a forward of `tokens` positions: with `model.gradient_checkpointing`,
    only one whose saved activations would pass `WARM_START_ROW_ACT_BYTES` (a forward holds a few short
    transcripts at most, so its activations are small, and the recompute would cost ~1/3 more compute for
    nothing)."""
    return checkpointing and activation_bytes(d, tokens, False) > WARM_START_ROW_ACT_BYTES


def warm_start_forwards(d: ModelDims, lengths: list[int]) -> list[list[int]]:
    """The warm start's forwards over one optimizer step's transcripts (their `lengths`): indices shortest
    first, each forward as many rows as fit `WARM_START_ROW_ACT_BYTES` padded to its longest (a row over it goes
    alone). Two ~225-token rows in one forward run ~1.2x the tokens/s of one (bench/sft_rows.py: bigger GEMMs);
    sorting keeps the padding small (~7% over the look-act demonstrations)."""
    out: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        group = out[-1] if out else []
        if group and activation_bytes(d, lengths[i] * (len(group) + 1), False) <= WARM_START_ROW_ACT_BYTES:
            group.append(i)
        else:
            out.append([i])
    return out


def micro_batch_tokens(cfg: RunConfig) -> int:
    """Positions one trainer forward computes at most."""
    t, r = cfg.trainer, cfg.rollout
    row = r.max_prompt_len + r.max_response_len
    if t.max_tokens_per_micro_batch:  # a row longer than the budget goes alone
        return max(t.max_tokens_per_micro_batch, row)
    return t.micro_batch_size * row


def tied_embedding_grad_bytes(dims: ModelDims) -> float:
    """The backward's transient when the input embedding is the head's weight: the embedding's dense gradient
    and its sum with the head's, two vocab x hidden fp32 buffers beside the weight's own grad (a probe of the
    tied SmolLM2 shape: 0.37 GB above the RSS before backward for a 0.11 GB weight; 2026-12-07)."""
    return 2.0 * dims.vocab * dims.hidden * 4.0


def estimate_memory(cfg: RunConfig, dims: ModelDims) -> MemoryEstimate:
    s, a = cfg.serving, cfg.algorithm
    parts: dict[str, float] = {"base": BASE_BYTES}
    rl = ["base"]
    notes: list[str] = []
    if s.engine == "embedded":
        eb = DTYPE_BYTES[s.dtype]
        slots = (max(s.kv_budget_tokens // BLOCK_SIZE, 2) + 1) * BLOCK_SIZE
        # thread replicas of a dense model without LoRA serve one copy (serving/pool_manager.create_pool), in a
        # synchronous run the trainer's own (serving.share_trainer_model: train/loop.servable_model)
        shared = s.placement == "thread" and cfg.model.lora.rank == 0 and not dims.moe
        if shared and cfg.engines_serve_trainer_model():
            notes.append("the engines serve the trainer's weights (serving.share_trainer_model)")
        else:
            parts["engine weights"] = (1 if shared else s.n_replicas) * dims.params * eb
            rl.append("engine weights")
        parts["KV"] = s.n_replicas * slots * dims.layers * dims.kv_heads * dims.head_dim * 2 * eb
        rl.append("KV")
    lora = cfg.model.lora
    if lora.enabled:  # the base frozen in fp32; only the adapter has gradients and AdamW state
        adapter = dims.lora_params(lora.rank, lora.target_modules)
        parts["trainer weights+grads+AdamW"] = dims.params * 4.0 + adapter * 16.0
    else:
        parts["trainer weights+grads+AdamW"] = dims.params * 16.0  # fp32 weights + grads + AdamW exp_avg / exp_avg_sq
        if dims.tied:
            parts["tied-embedding grad"] = tied_embedding_grad_bytes(dims)
    trainer_state = [p for p in ("trainer weights+grads+AdamW", "tied-embedding grad") if p in parts]
    rl += trainer_state
    if a.kl_coef > 0:
        parts["reference"] = dims.params * 4.0
        rl.append("reference")
    if a.adv_estimator == "gae":
        parts["critic"] = dims.params * 16.0
        rl.append("critic")
    tokens = micro_batch_tokens(cfg)
    ckpt = cfg.model.gradient_checkpointing
    if ckpt == "long_rows":  # micro-batches within the budget keep their activations, a longer row is recomputed
        budget = cfg.trainer.max_tokens_per_micro_batch or tokens
        parts["act"] = max(activation_bytes(dims, budget, False), activation_bytes(dims, tokens, True))
    else:
        parts["act"] = activation_bytes(dims, tokens, bool(ckpt))
    parts["logits"] = LOGITS_COPIES * min(LOGITS_CHUNK, tokens) * dims.vocab * 4.0
    rl += ["act", "logits"]
    phases = {"rl": rl}
    if s.free_kv_during_update and "KV" in rl:  # the update runs without the pools, the rollout without the update's
        held = ("base", "engine weights", "KV", "trainer weights+grads+AdamW", "reference", "critic")
        phases = {"update": [p for p in rl if p != "KV"], "rollout": [p for p in rl if p in held]}
    w = cfg.warm_start
    if w.enabled:
        ws_tokens = WARM_START_TOKENS_PER_ROW  # a few transcripts per forward (gradients accumulated)
        recompute = warm_start_recomputes(dims, ws_tokens, bool(cfg.model.gradient_checkpointing))
        one_row = activation_bytes(dims, ws_tokens, recompute)  # a row too long to share a forward goes alone
        parts["warm-start act"] = one_row if recompute else max(one_row, WARM_START_ROW_ACT_BYTES)
        parts["warm-start logits"] = LOGITS_COPIES * min(LOGITS_CHUNK, ws_tokens) * dims.vocab * 4.0
        state = trainer_state
        if lora.enabled:  # the warm start fine-tunes every weight whatever the RL steps train
            parts["warm-start weights+grads+AdamW"] = dims.params * 16.0
            state = ["warm-start weights+grads+AdamW"]
            if dims.tied:
                parts["warm-start tied-embedding grad"] = tied_embedding_grad_bytes(dims)
                state.append("warm-start tied-embedding grad")
        phases["warm start"] = ["base", *state, "warm-start act", "warm-start logits"]
    return MemoryEstimate(parts, phases, notes)


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg: RunConfig, model_dir: Path | None, structure_only: bool = False,
                 host_bytes: int | None = None) -> list[CheckResult]:
    name = "memory"
    if cfg.cluster.runtime == "ray" or cfg.trainer.n_ranks > 1:
        return [skip(name, "peak memory is estimated for one process (cluster.runtime local, trainer.n_ranks 1)")]
    if model_dir is None:
        why = "--structure-only" if structure_only else "model not prepared yet"
        return [skip(name, f"peak memory not estimated ({why}: needs the model's config.json)")]
    from legorl.ops.preflight_model import read_model_config

    est = estimate_memory(cfg, ModelDims.from_config(read_model_config(model_dir)))
    host = host_memory_bytes() if host_bytes is None else host_bytes
    if host and est.peak > 0.9 * host and not structure_only:
        return [warn(name, f"{est.line()}; this host has {host / GB:.1f} GB",
                     "lower serving.kv_budget_tokens or trainer.max_tokens_per_micro_batch, or set "
                     "model.gradient_checkpointing=true")]
    return [ok(name, est.line())]
