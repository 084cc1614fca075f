"""Harbor's task.toml schema as legorl reads it: which keys exist, their types and ranges.

Harbor ignores keys it does not know, and its schema grows every few months, so an unknown key is a
WARNING here (with a "did you mean" hint, since most are typos) unless validation is strict. Type
and range problems are errors: a wrong type would silently fall back to a default.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

Add = Callable[[str, str], None]  # (file, message)

NETWORK_MODES = ("public", "no-network", "allowlist")
_PHASE_NET = {"network_mode", "allowed_hosts", "network"}
_ENV_KEYS = {"build_timeout_sec", "docker_image", "cpus", "memory", "memory_mb", "storage", "storage_mb",
             "gpus", "gpu_types", "allow_internet", "workdir", "mcp_servers", "skills_dir", "env",
             "healthcheck", "os", *_PHASE_NET}
TOP_KEYS = {"version", "schema_version", "source", "metadata", "task", "verifier", "agent", "environment",
            "solution", "artifacts", "steps", "os", "multi_step_reward_strategy"}
SECTION_KEYS: dict[str, set[str]] = {
    "verifier": {"timeout_sec", "env", "user", "environment_mode", "environment", *_PHASE_NET},
    "agent": {"timeout_sec", "user", "env", *_PHASE_NET},
    "solution": {"env"},
    "environment": _ENV_KEYS,
    "verifier.environment": _ENV_KEYS - {"docker_image"},
    "environment.healthcheck": {"command", "interval_sec", "timeout_sec", "start_period_sec",
                                "start_interval_sec", "retries"},
}
SUBTABLES = {"verifier": {"environment"}, "environment": {"healthcheck"},
             "verifier.environment": {"healthcheck"}}
FREE_SECTIONS = {"metadata", "task"}  # free-form tables: any keys allowed
_NUMBER = (int, float)
_STR_OR_INT = (str, int)
_ENV_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "build_timeout_sec": (_NUMBER, "a number"),
    "docker_image": (str, "a string"),
    "cpus": (_NUMBER, "a number"),
    "memory": (str, 'a size string like "2G"'),
    "memory_mb": (int, "an integer"),
    "storage": (str, 'a size string like "10G"'),
    "storage_mb": (int, "an integer"),
    "gpus": (int, "an integer"),
    "gpu_types": (list, "an array"),
    "allow_internet": (bool, "a boolean"),
    "workdir": (str, "a string"),
    "env": (dict, "a table"),
    "healthcheck": (dict, "a table"),
    "os": (str, "a string"),
    "network_mode": (str, "a string"),
    "allowed_hosts": (list, "an array"),
    "network": ((str, dict), "a string or a table"),
    "skills_dir": (str, "a string"),
    "mcp_servers": (list, "an array"),
}
TYPES: dict[str, dict[str, tuple[type | tuple[type, ...], str]]] = {
    "": {"version": (str, "a string"), "schema_version": (str, "a string"), "source": (str, "a string"),
         "artifacts": (list, "an array"), "os": (str, "a string")},
    "verifier": {"timeout_sec": (_NUMBER, "a number"), "env": (dict, "a table"),
                 "user": (_STR_OR_INT, "a user name or uid"), "environment_mode": (str, "a string"),
                 "environment": (dict, "a table"), **{k: _ENV_TYPES[k] for k in _PHASE_NET}},
    "agent": {"timeout_sec": (_NUMBER, "a number"), "env": (dict, "a table"),
              "user": (_STR_OR_INT, "a user name or uid"), **{k: _ENV_TYPES[k] for k in _PHASE_NET}},
    "solution": {"env": (dict, "a table")},
    "environment": _ENV_TYPES,
    "verifier.environment": _ENV_TYPES,
    "environment.healthcheck": {"command": (str, "a string"), "interval_sec": (_NUMBER, "a number"),
                                "timeout_sec": (_NUMBER, "a number"), "start_period_sec": (_NUMBER, "a number"),
                                "start_interval_sec": (_NUMBER, "a number"), "retries": (int, "an integer")},
}
ENVIRONMENT_MODES = ("shared", "separate")


def type_name(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table",
            list: "array"}.get(type(v), type(v).__name__)


def parse_size_mb(text: str) -> int | None:
    """'2G' -> 2048, '512M' -> 512, '1.5g' -> 1536; None when unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    scale = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def _where(section: str, key: str) -> str:
    return f"[{section}].{key}" if section else key


def _norm(section: str) -> str:
    return "environment.healthcheck" if section.endswith(".healthcheck") else section


def _check_keys(section: str, table: dict[str, Any], warn: Add) -> None:
    known = TOP_KEYS if not section else SECTION_KEYS[_norm(section)]
    for key in table:
        if key in known:
            continue
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(sorted(known))})"
        warn("task.toml", f"unknown key {_where(section, key)}{hint}")


def _check_type(section: str, key: str, value: Any, add: Add) -> bool:
    spec = TYPES.get(_norm(section), {}).get(key)
    if spec is None:
        return True
    want, desc = spec
    # bool is an int subclass in Python; TOML keeps them apart, so do we.
    ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
    if not ok:
        add("task.toml", f"{_where(section, key)} must be {desc}, got {type_name(value)} {value!r}")
    return ok


def _check_range(section: str, key: str, value: Any, add: Add) -> None:
    w = _where(section, key)
    if key.endswith("_sec") or key in ("cpus", "memory_mb", "storage_mb"):
        if isinstance(value, _NUMBER) and value <= 0 and key != "start_period_sec":
            add("task.toml", f"{w} must be > 0, got {value!r}")
    elif key in ("memory", "storage") and parse_size_mb(value) is None:
        add("task.toml", f'{w} is not a size like "2G" or "512M": {value!r}')
    elif key == "env" and not all(isinstance(v, str) for v in value.values()):
        bad = next(k for k, v in value.items() if not isinstance(v, str))
        add("task.toml", f"{w} values must be strings, got {type_name(value[bad])} for {bad}")
    elif key == "workdir" and not value.startswith("/"):
        add("task.toml", f"{w} must be an absolute path, got {value!r}")
    elif key in ("network_mode", "network") and isinstance(value, str) and value not in NETWORK_MODES:
        add("task.toml", f"{w} must be one of {', '.join(NETWORK_MODES)}, got {value!r}")
    elif key == "os" and value.lower() != "linux":
        add("task.toml", f"{w} = {value!r}: legorl's sandboxes run Linux only")
    elif key == "environment_mode" and value not in ENVIRONMENT_MODES:
        add("task.toml", f"{w} must be one of {', '.join(ENVIRONMENT_MODES)}, got {value!r}")
    elif key == "allowed_hosts" and not all(isinstance(h, str) for h in value):
        add("task.toml", f"{w} must be an array of host names")
    elif key == "command" and not value.strip():
        add("task.toml", f"{w} is empty")
    elif key == "artifacts":
        for a in value:
            path = a if isinstance(a, str) else a.get("source", a.get("path")) if isinstance(a, dict) else None
            if not isinstance(path, str) or not path.startswith("/"):
                add("task.toml", f"artifacts entries must be absolute paths (or tables with source), got {a!r}")


def _check_table(section: str, table: dict[str, Any], add: Add, warn: Add) -> None:
    _check_keys(section, table, warn)
    subs = SUBTABLES.get(section, set())
    for key, value in table.items():
        if not _check_type(section, key, value, add):
            continue
        if key in subs:
            _check_table(f"{section}.{key}" if section else key, value, add, warn)
        else:
            _check_range(section, key, value, add)


def validate_config(cfg: dict[str, Any], add: Add, warn: Add) -> None:
    """Every problem of a parsed task.toml: `add` for errors, `warn` for unknown keys."""
    _check_keys("", cfg, warn)
    if "steps" in cfg:
        n = len(cfg["steps"]) if isinstance(cfg["steps"], list) else "?"
        add("task.toml", f"multi-step task ([[steps]], {n} steps) is not supported: legorl runs "
                         "single-step Harbor tasks")
    for key, value in cfg.items():
        if key in SECTION_KEYS or key in FREE_SECTIONS:
            if not isinstance(value, dict):
                add("task.toml", f"[{key}] must be a table, got {type_name(value)} {value!r}")
            elif key in SECTION_KEYS:
                _check_table(key, value, add, warn)
        elif _check_type("", key, value, add):
            _check_range("", key, value, add)


def phase_network(section: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(network mode, allowed hosts) a section asks for; (None, []) when it says nothing."""
    net = section.get("network")
    mode = section.get("network_mode")
    hosts = list(section.get("allowed_hosts", []))
    if isinstance(net, str):
        mode = mode or net
    elif isinstance(net, dict):
        mode = mode or net.get("mode") or net.get("network_mode")
        hosts = hosts or list(net.get("allowed_hosts", []))
    if mode is None and hosts:
        mode = "allowlist"
    return mode, hosts


def baseline_network(env: dict[str, Any]) -> tuple[str, list[str]]:
    """[environment]'s mode; the deprecated allow_internet maps to public / no-network.

    With neither key, legorl's default is no network (Harbor's is public): a trial reaches the
    network only when its task asks.
    """
    mode, hosts = phase_network(env)
    if mode is not None:
        return mode, hosts
    return ("public" if env.get("allow_internet") else "no-network"), []
