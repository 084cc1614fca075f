"""Weight-update checks that run before any vLLM server is touched (no server needed)."""

from __future__ import annotations

import pytest
import torch

from legorl.serving.types import InvalidRequestError
from legorl.serving.vllm.weights import SafetensorsExporter, check_state_dict

EXPECTED = {f"model.layers.0.{m}.weight": (4, 4) for m in
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")} | {"model.embed_tokens.weight": (8, 4)}


def sd(*modules: str) -> dict[str, torch.Tensor]:
    return {f"model.layers.0.{m}.weight": torch.zeros(4, 4) for m in modules}


def test_whole_modules_pass_and_split_fused_modules_are_refused():
    check_state_dict(sd("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.down_proj"), EXPECTED, True)
    check_state_dict({"lm_head.weight": torch.zeros(8, 4)}, EXPECTED, tied=True)  # tied: ignored
    with pytest.raises(InvalidRequestError, match=r"q_proj\.weight without k_proj, v_proj"):
        check_state_dict(sd("self_attn.q_proj"), EXPECTED, True)
    with pytest.raises(InvalidRequestError, match=r"gate_proj\.weight without up_proj"):
        check_state_dict(sd("mlp.gate_proj", "mlp.down_proj"), EXPECTED, True)
    with pytest.raises(InvalidRequestError, match="unknown parameter"):
        check_state_dict({"nope": torch.zeros(1)}, EXPECTED, True)
    with pytest.raises(InvalidRequestError, match="shape"):
        check_state_dict({"model.embed_tokens.weight": torch.zeros(3)}, EXPECTED, True)


async def test_exporter_writes_each_version_once_with_the_tied_head(tmp_path):
    from safetensors.torch import load_file

    ex = SafetensorsExporter(tmp_path)
    emb = torch.randn(8, 4)
    state = {"model.embed_tokens.weight": emb, "lm_head.weight": emb}  # aliased, as HF ties them
    p1 = await ex.export(state, 1, tied=True)
    assert await ex.export(state, 1, tied=True) == p1  # a second replica reuses the file
    files = load_file(str(p1 / "model.safetensors"))
    assert torch.equal(files["lm_head.weight"], emb) and torch.equal(files["model.embed_tokens.weight"], emb)
    p2 = await ex.export(state, 2, tied=True)
    assert p2.exists() and not p1.exists() and ex.latest == (2, p2)  # only the newest version is kept
    ex.close()
    assert not ex.root.exists()
