"""Shared fixtures: model directories from the store (tiny models build in seconds, seeded)."""

from __future__ import annotations

from pathlib import Path

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
def tokenizer(tiny_llama_dir):
    from legorl.models.chat import load_tokenizer

    return load_tokenizer(tiny_llama_dir)


@pytest.fixture(scope="session")
def engine(tiny_llama_dir):
    """One real tiny-llama engine shared by the session (proxy and worker tests)."""
    import asyncio

    from legorl.serving.embedded import EmbeddedEngine

    eng = EmbeddedEngine.from_pretrained(tiny_llama_dir, kv_budget_tokens=65536, seed=0)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="session")
def smollm_dir():
    from legorl.models import prepare_model

    return prepare_model("smollm2-135m-instruct")


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.fixture
def tiny_run_config(tmp_path, tiny_llama_dir):
    """Write a run config for a tiny-model training run (runs under tmp_path/runs/<name>); tests
    override sections as dicts, e.g. tiny_run_config("t", trainer={"total_steps": 3})."""
    import tomli_w

    def write(name: str, **sections) -> Path:
        base = {
            "run": {"name": name, "output_dir": str(tmp_path / "runs")},
            "model": {"path": str(tiny_llama_dir)},
            "tasks": {"train": "builtin:shell-basics", "val_fraction": 0.0},
            "rollout": {"max_turns": 1, "max_response_len": 8, "concurrency": 4},
            "agent": {"name": "builtin"},
            "serving": {"kv_budget_tokens": 8192},
            # a random tiny model solves nothing: the entropy term still gives a gradient
            "algorithm": {"n_resp_per_prompt": 2, "entropy_coef": 0.01},
            "trainer": {"lr": 1e-3},
        }
        path = tmp_path / "run.toml"
        path.write_text(tomli_w.dumps(_merge(base, sections)))
        return path

    return write


@pytest.fixture(scope="session")
def vllm_executable():
    """The `vllm` executable (built by `bash scripts/setup.sh`). Missing: skip, or fail where CI asks for it
    with LEGORL_REQUIRE_VLLM=1 (so the vLLM tests can never silently stop running there)."""
    import os

    from legorl.serving.vllm import VLLMNotInstalledError, find_vllm_executable

    try:
        return find_vllm_executable()
    except VLLMNotInstalledError as e:
        if os.environ.get("LEGORL_REQUIRE_VLLM") == "1":
            pytest.fail(f"LEGORL_REQUIRE_VLLM=1 but {e}")
        pytest.skip(str(e))


def _xdist_workers(config) -> bool:
    return bool(config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None))


def pytest_configure(config):
    """Under pytest-xdist every worker gets one OpenMP thread (unless the caller set OMP_NUM_THREADS):
    two workers with two spinning threads each on a 2-core machine collapse (docs: OpenMP
    oversubscription). Set here, in the worker, before any test imports torch."""
    import os

    if hasattr(config, "workerinput"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_sessionstart(session):
    """Under pytest-xdist, build the store's models once in the controller before the workers start
    (two workers preparing the same model at once would replace each other's directory)."""
    if _xdist_workers(session.config) and not hasattr(session.config, "workerinput"):
        from legorl.models import prepare_model

        for name in ("tiny-llama", "tiny-qwen3-moe", "smollm2-135m-instruct"):
            prepare_model(name)


def _worker_group(nodeid: str) -> str | None:
    """The tests that must share one xdist worker: "ray" (tests/cluster), "vllm" (`*vllm*` files), "podman"
    (tests/env/test_docker*.py: one Podman store, so a test on the other worker would see, and have its
    cleanup-by-label count, this one's containers); None: any."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/cluster/"):
        return "ray"
    if path.startswith("tests/env/test_docker"):
        return "podman"
    return "vllm" if "vllm" in path.rsplit("/", 1)[-1] else None


def pytest_collection_modifyitems(config, items):
    """Under xdist, the slow tests outside the two groups go first (the longest jobs first keeps the last
    minutes from running one long test alone while the other worker idles); the groups keep their order."""
    if hasattr(config, "workerinput"):  # each worker collects; all sort alike, so their collections agree
        items.sort(key=lambda it: not (it.get_closest_marker("slow") and _worker_group(it.nodeid) is None))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n 2`: tests are spread one by one, except that every test of a `*vllm*` file runs on one worker,
    in file order: the SmolLM2 vLLM server of tests/serving (its conftest.py) is started once for its
    files, the restart test still runs after the other users of that server, and two vLLM servers never
    start at the same time. Likewise every
    test of `tests/cluster/` runs on one worker, in order, sharing one Ray cluster (tests/cluster/conftest.py).
    (xdist's own `--dist loadgroup` cannot do this on pytest 9.2: its node-id rewrite has no effect.)"""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class VLLMFilesOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _worker_group(nodeid) or nodeid

    return VLLMFilesOnOneWorker(config, log)


@pytest.fixture(autouse=True, scope="session")
def _private_warm_start_cache(tmp_path_factory):
    """`warm_start.cache` stores under this session's temporary directory (subprocesses inherit it), never in the
    user's $LEGORL_HOME, where the tiny models' entries would evict real ones."""
    import os

    os.environ["LEGORL_WARM_STARTS"] = str(tmp_path_factory.mktemp("warm_starts"))

