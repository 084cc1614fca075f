#!/bin/bash
# Oracle for pyfix-semver: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- verlib
cat > verlib/version.py <<'LEGORL_EOF'
def parse(version: str):
    """'v1.2.3' -> (1, 2, 3)."""
    parts = version.strip().lstrip("v").split(".")
    if len(parts) != 3:
        raise ValueError(f"not MAJOR.MINOR.PATCH: {version!r}")
    return tuple(int(p) for p in parts)


def compare(a: str, b: str) -> int:
    pa, pb = parse(a), parse(b)
    return (pa > pb) - (pa < pb)


def max_version(versions):
    return max(versions, key=parse)
LEGORL_EOF
