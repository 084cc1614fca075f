"""vLLM as an `Engine`: supervised `vllm serve` processes driven over HTTP (see engine.py)."""

from legorl.serving.vllm.engine import PrefixProbeUnavailable, VLLMEngine
from legorl.serving.vllm.server import (
    VLLMNotInstalledError,
    VLLMServer,
    VLLMServerConfig,
    VLLMStartupError,
    find_vllm_executable,
)
from legorl.serving.vllm.weights import SafetensorsExporter

__all__ = [
    "PrefixProbeUnavailable", "SafetensorsExporter", "VLLMEngine", "VLLMNotInstalledError", "VLLMServer",
    "VLLMServerConfig", "VLLMStartupError", "find_vllm_executable",
]
