"""The embedded engine: continuous batching + prefix cache over an HF model (see engine.py)."""

from legorl.serving.embedded.engine import EmbeddedEngine

__all__ = ["EmbeddedEngine"]
