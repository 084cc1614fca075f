"""docs/configuration.md is generated from the config's field docstrings: it must be current, and
every field must have a docstring."""

from __future__ import annotations

from pydantic import BaseModel

from legorl.config import RunConfig
from legorl.config.docs import DOC_PATH, render


def _fields(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _fields(field.annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def test_every_config_field_has_a_docstring():
    missing = [key for key, field in _fields(RunConfig) if not (field.description or "").strip()]
    assert not missing, f"config fields without a docstring: {missing}"


def test_configuration_doc_is_current():
    assert DOC_PATH.read_text() == render(), (
        "docs/configuration.md is stale: run `.venv/bin/python -m legorl.config.docs --write`")
