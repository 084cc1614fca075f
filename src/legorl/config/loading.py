"""Read the run config from TOML layers.

Layering: site file (`$LEGORL_SITE_CONFIG` or `$LEGORL_HOME/site.toml`) < run file < `key=value`
overrides (`trainer.lr=1e-5`). Every key has a default, so a run file only says what differs.
Unknown keys, wrong types and impossible combinations are a `ConfigError` with one line per problem.
Keys of the older flat layout (`rollout.engine`, `serving.vllm_dtype`, ...) are read under their new
names with a warning that names the new key (`MOVED_KEYS`).
"""

from __future__ import annotations

import os
import tomllib
import warnings
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from legorl.config.run import RunConfig
from legorl.models.store import legorl_home

_SCHEDULER_KEYS = ("high_watermark", "hit_threshold", "wait_poll_sec", "idle_grace_sec", "max_wait_sec",
                   "preempt_superseded", "attempt_overlap", "count_pending")
_VLLM_KEYS = ("executable", "urls", "dtype", "kv_cache_gib", "gpu_memory_utilization", "tensor_parallel_size",
              "enforce_eager", "extra_args", "startup_timeout_sec", "weights_dir")
MOVED_KEYS: dict[str, str] = {
    "rollout.engine": "serving.engine",
    "rollout.n_replicas": "serving.n_replicas",
    "rollout.kv_budget_tokens": "serving.kv_budget_tokens",
    "rollout.agent": "agent.name",
    "rollout.agent_kwargs": "agent.kwargs",
    "rollout.tool_parser": "agent.tool_parser",
    "rollout.agent_timeout_sec": "agent.timeout_sec",
    "rollout.sandbox": "sandbox.backend",
    "rollout.verifier_timeout_sec": "sandbox.verifier_timeout_sec",
    "rollout.train_mode": "async_training.enabled",
    "rollout.staleness_threshold": "async_training.staleness_threshold",
    "rollout.partial_rollout": "async_training.partial_rollout",
    "trainer.trigger_parameter_sync_step": "async_training.trigger_parameter_sync_step",
    "rollout.runtime": "cluster.runtime",
    "rollout.ray_address": "cluster.ray_address",
    **{f"serving.{k}": f"serving.scheduler.{k}" for k in _SCHEDULER_KEYS},
    **{f"serving.vllm_{k}": f"serving.vllm.{k}" for k in _VLLM_KEYS},
}


class ConfigKeyMoved(FutureWarning):
    """A key of the older flat layout was read under its new name (the CLI prints it on one line)."""


class ConfigError(ValueError):
    """A config problem; `problems` holds one human-readable line per issue."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such config file"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: invalid TOML: {exc}"]) from None


def _parse_override(item: str) -> dict[str, Any]:
    if "=" not in item:
        raise ConfigError([f"override {item!r}: expected key=value, e.g. trainer.lr=1e-5"])
    key, raw = item.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # bare strings need no quotes on the command line
    node: dict[str, Any] = {}
    cur = node
    parts = key.strip().split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return node


def site_config_path() -> Path:
    return Path(os.environ.get("LEGORL_SITE_CONFIG", legorl_home() / "site.toml"))


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        elif not loc:
            lines.extend(m.strip() for m in err["msg"].removeprefix("Value error, ").split(";"))
        else:
            lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return lines


def migrate_keys(data: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """Move keys of the older flat layout to their sections (warning once per key)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    serving = data.get("serving")
    if isinstance(serving, dict) and isinstance(serving.get("scheduler"), bool):
        serving["scheduler"] = {"enabled": serving["scheduler"]}
        warnings.warn(f"{where}: serving.scheduler = true|false moved to serving.scheduler.enabled",
                      ConfigKeyMoved, stacklevel=3)
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".", 1)
        table = data.get(section)
        if not isinstance(table, dict) or key not in table:
            continue
        value = table.pop(key)
        if old == "rollout.train_mode":
            if value not in ("sync", "async"):
                raise ConfigError([f"rollout.train_mode={value!r}: use async_training.enabled = true|false"])
            value = value == "async"
        warnings.warn(f"{where}: {old} moved to {new}; reading it there", ConfigKeyMoved, stacklevel=3)
        node = data
        *parents, leaf = new.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                break
        else:
            node.setdefault(leaf, value)
    return data


def merge_layers(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """site file < run file < key=value overrides, merged, before validation."""
    data: dict[str, Any] = {}
    site = site_config_path()
    if site.is_file():
        data = migrate_keys(_read_toml(site), str(site))
    if path is not None:
        data = _deep_merge(data, migrate_keys(_read_toml(Path(path)), str(path)))
    for item in overrides or []:
        if item.startswith("~"):
            _unset(data, item)
            continue
        data = _deep_merge(data, migrate_keys(_parse_override(item), f"override {item!r}"))
    return data


def _unset(data: dict[str, Any], item: str) -> None:
    """`~section.key`: drop a key the site or run file set, so its default applies (as Hydra's `~key`)."""
    *parents, leaf = item[1:].strip().split(".")
    node: Any = data
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node or "=" in item:
        raise ConfigError([f"override {item!r}: ~KEY removes a key the config file sets, and "
                           f"{item[1:].split('=')[0]!r} is not set there (to set a value: KEY=VALUE)"])
    del node[leaf]


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    data = merge_layers(path, overrides)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from None
