def deep_merge(base: dict, override: dict) -> dict:
    """A new dict: base updated with override (nested dicts merged)."""
    result = dict(base)
    for key, value in override.items():
        result[key] = value
    return result
