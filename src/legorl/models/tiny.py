"""Tiny random-weight models built from a config, for unit tests that must run in seconds.

They reuse SmolLM2's tokenizer (ChatML template) so the proxy and scaffolds see a real template.
Weights are seeded, so every machine builds the same model.
"""

from __future__ import annotations

from pathlib import Path

from legorl.models.gguf import SMOLLM2
from legorl.models.home import prepare_entry

TINY_SEED = 1234
# Tied embeddings at this scale give next-token entropy ~4 nats: neither uniform noise nor a
# single-token collapse, so logprob tests compare meaningful numbers.
EMBED_STD = 0.2


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(prepare_entry(SMOLLM2))


def _save(model, out: Path) -> None:
    tok = _tokenizer()
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    model.config.bos_token_id = tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def _attention(head_dim: int) -> dict[str, int]:
    """Heads of `head_dim` over the hidden size of 64, two queries per key/value head (at least one of each)."""
    heads = 64 // head_dim
    return {"num_attention_heads": heads, "num_key_value_heads": max(heads // 2, 1), "head_dim": head_dim}


def build_tiny_llama(out: Path, head_dim: int = 16) -> None:
    """head_dim 16 (the registered `tiny-llama`); vLLM-cpu's attention needs 32 or more."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(TINY_SEED)
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        **_attention(head_dim),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
    )
    model = LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, EMBED_STD)
    _save(model, out)


def build_tiny_qwen3_moe(out: Path, num_experts: int = 4, top_k: int = 2, expert_std: float | None = None,
                         head_dim: int = 16) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(TINY_SEED)
    cfg = Qwen3MoeConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        **_attention(head_dim),
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        decoder_sparse_step=1,
        norm_topk_prob=True,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    model = Qwen3MoeForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, EMBED_STD)
        if expert_std is not None:  # experts that matter: routing choices then move the logits
            for layer in model.model.layers:
                for p in layer.mlp.experts.parameters():
                    p.normal_(0.0, expert_std)
    _save(model, out)
