"""Model store: named models prepared into plain HF directories under LEGORL_HOME."""

from legorl.models.store import (
    DEFAULT_MODEL,
    ModelNotFoundError,
    list_models,
    prepare_model,
    resolve_model,
)

__all__ = ["DEFAULT_MODEL", "ModelNotFoundError", "list_models", "prepare_model", "resolve_model"]
