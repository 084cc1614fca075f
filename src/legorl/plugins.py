"""One way to name an extension: a registered short name, or `package.module:attr`.

Scaffolds, sandbox backends, advantage estimators and policy losses all resolve through
`load_object`, so a researcher plugs in their own class or function from their own package
(`backend = "mypkg.sandboxes:MySandbox"`) without forking legorl. The bottom layer: it imports
nothing from legorl, and registered targets given as strings are imported only when asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def load_object(spec: str, registry: Mapping[str, str | object], kind: str) -> Any:
    """The object behind `spec`: a key of `registry`, else an import path `module:attr`.

    A registry value is either the object itself or its own `module:attr` string (imported on
    use, so listing a backend costs nothing until a run picks it). `attr` may be dotted
    (`module:Outer.inner`). Raises ValueError with one line naming `kind` and what to do.
    """
    target = registry.get(spec, spec)
    if not isinstance(target, str):
        return target
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(registry))
        raise ValueError(f"unknown {kind} {spec!r}: use one of {names} or 'module:Class'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or the module failing while it imports
        via = f" ({target})" if target != spec else ""
        why = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot load {kind} {spec!r}{via}: {why}") from exc
    return obj
