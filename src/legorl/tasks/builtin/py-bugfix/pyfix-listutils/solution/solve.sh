#!/bin/bash
# Oracle for pyfix-listutils: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- listkit
cat > listkit/ops.py <<'LEGORL_EOF'
from collections.abc import Iterable


def chunks(items, size):
    if size < 1:
        raise ValueError("size must be >= 1")
    return [items[i:i + size] for i in range(0, len(items), size)]


def dedupe(items):
    return list(dict.fromkeys(items))


def flatten(items):
    out = []
    for item in items:
        if isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
LEGORL_EOF
