#!/bin/bash
# Oracle for pyfix-confmerge: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- confmerge
cat > confmerge/merge.py <<'LEGORL_EOF'
def deep_merge(base: dict, override: dict) -> dict:
    """A new dict: base updated with override (nested dicts merged)."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value
    return result
LEGORL_EOF
