import json

from confmerge.merge import deep_merge


def _parse_value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def apply_overrides(config: dict, overrides: list[str]) -> dict:
    """Apply 'a.b.c=value' overrides (values parsed as JSON when possible)."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ValueError(f"override must look like key.path=value: {item!r}")
        nested = _parse_value(raw)
        for key in reversed(path.split(".")):
            nested = {key: nested}
        config = deep_merge(config, nested)
    return config
