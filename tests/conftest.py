"""Shared fixtures: model directories from the store (tiny models build in seconds, seeded)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_llama_dir():
    from legorl.models import prepare_model

    return prepare_model("tiny-llama")


@pytest.fixture(scope="session")
def tiny_moe_dir():
    from legorl.models import prepare_model

    return prepare_model("tiny-qwen3-moe")


@pytest.fixture(scope="session")
def smollm_dir():
    from legorl.models import prepare_model

    return prepare_model("smollm2-135m-instruct")
