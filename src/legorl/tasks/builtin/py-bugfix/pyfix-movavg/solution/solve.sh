#!/bin/bash
# Oracle for pyfix-movavg: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- series
cat > series/window.py <<'LEGORL_EOF'
def windows(values, size):
    if size <= 0:
        raise ValueError("window size must be positive")
    return [values[i:i + size] for i in range(len(values) - size + 1)]


def moving_average(values, size):
    return [sum(w) / size for w in windows(values, size)]
LEGORL_EOF
