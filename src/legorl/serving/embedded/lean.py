"""A decode step's forward without the HF modules, for the dense decoders the embedded engine serves most.

An 8-row decode step of SmolLM2-135M on one core spends ~44 ms in the linears (skinny_linear.c) and ~13 ms in
attention; through the HF modules it took ~74 ms in all, ~10 ms of it their Python and ~2,000 torch calls a step
(views, transposes, the RoPE slices), each paying the few-row linears' torch function mode on the way
(`bench/lean_decode.py`, docs/serving.md). This module runs the same computation as a flat loop over the model's
own modules: the same weights (read at each call, so a weight sync or a shared trainer model is seen), the
same ops in the same order, the linears called directly in the kernel and the attention in the decode kernel
over the paged pool. The logits are bit for bit those of the HF path (tests/serving/test_lean_decode.py); the
engine takes it for a step whose every row decodes one token, in fp32 with both C kernels on, no LoRA adapter
loaded and a dense Llama / Qwen2 / Qwen3 decoder (`LeanDecoder.for_model` says None otherwise and the HF path
runs, as for prefill chunks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from legorl.serving.embedded import skinny_linear as few_rows
from legorl.serving.embedded.decode_kernel import decode_attention
from legorl.serving.embedded.paged import StepBatch

# decoder layers whose forward is exactly: x + attn(norm(x)); x + mlp(norm(x)), gated MLP, RoPE on q/k
# (Qwen3: an RMSNorm over each head's q and k first), no sliding window, no MoE
LAYERS = {"LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer"}
NORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"}


def _linear(x: torch.Tensor, m: torch.nn.Linear, kernel: bool) -> torch.Tensor:
    """As the HF path calls it: into the kernel when the step is few-row (`kernel`) and the call fits, else
    torch's linear on the [1, T, H] shape the HF modules pass."""
    w, b = m.weight, m.bias
    if kernel and few_rows._fits(x, w):
        return few_rows.skinny_linear(x, w, b)
    return F.linear(x[None], w, b)[0]


def _rms(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """HF's RMSNorm in fp32 (its casts are no-ops there), the same ops in the same order."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


class LeanDecoder:
    """The flat decode forward of one model (`for_model`), called per step with its packed inputs."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> LeanDecoder | None:
        """A decoder for `model` when its structure is one this module reproduces exactly, else None."""
        decoder = getattr(model, "get_decoder", lambda: None)()
        head = getattr(model, "get_output_embeddings", lambda: None)()
        cfg = getattr(model, "config", None)
        if decoder is None or not isinstance(head, torch.nn.Linear) or cfg is None:
            return None
        if getattr(cfg, "use_sliding_window", False):  # MoE decoders fail the layer-class check below
            return None
        if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
            return None
        parts = ("embed_tokens", "layers", "norm", "rotary_emb")
        if not all(hasattr(decoder, p) for p in parts) or type(decoder.norm).__name__ not in NORMS:
            return None
        for layer in decoder.layers:
            attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
            if type(layer).__name__ not in LAYERS or attn is None or mlp is None:
                return None
            if not all(hasattr(mlp, p) for p in ("gate_proj", "up_proj", "down_proj", "act_fn")):
                return None
            norms = [layer.input_layernorm, layer.post_attention_layernorm, *(
                getattr(attn, n) for n in ("q_norm", "k_norm") if hasattr(attn, n))]
            if any(type(n).__name__ not in NORMS for n in norms):
                return None
        return cls(model)

    def __call__(self, input_ids: torch.Tensor, position_ids: torch.Tensor, keep: torch.Tensor,
                 step: StepBatch) -> torch.Tensor:
        """Logits [len(keep), V] of a step of decode rows only (`step.n_dec` == tokens, the kernel's tables)."""
        decoder = self.model.get_decoder()
        ids = input_ids[0]
        t = ids.shape[0]
        kernel = t <= few_rows.MAX_ROWS  # the HF path's few-row mode covers the whole step or none of it
        h = F.embedding(ids, decoder.embed_tokens.weight)
        cos, sin = decoder.rotary_emb(h[None], position_ids)
        cos, sin = cos[0, :, None, :], sin[0, :, None, :]  # [T, 1, D]: broadcast over heads
        for layer in decoder.layers:
            attn = layer.self_attn
            d = attn.head_dim
            x = _rms(h, layer.input_layernorm)
            q = _linear(x, attn.q_proj, kernel).view(t, -1, d)
            k = _linear(x, attn.k_proj, kernel).view(t, -1, d)
            v = _linear(x, attn.v_proj, kernel).view(t, -1, d)
            if hasattr(attn, "q_norm"):
                q, k = _rms(q, attn.q_norm), _rms(k, attn.k_norm)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            pk, pv = step.k[attn.layer_idx], step.v[attn.layer_idx]
            pk.index_copy_(1, step.write_slots, k.transpose(0, 1))
            pv.index_copy_(1, step.write_slots, v.transpose(0, 1))
            out = q.new_empty(q.shape)
            decode_attention(q, pk, pv, step.dec_tables, step.dec_lens, step.block_size, attn.scaling, out,
                             step.dec_threads)
            h = h + _linear(out.view(t, -1), attn.o_proj, kernel)
            x = _rms(h, layer.post_attention_layernorm)
            mlp = layer.mlp
            gate = mlp.act_fn(_linear(x, mlp.gate_proj, kernel))
            h = h + _linear(gate * _linear(x, mlp.up_proj, kernel), mlp.down_proj, kernel)
        return _linear(_rms(h[keep], decoder.norm), self.model.get_output_embeddings(), kernel)
