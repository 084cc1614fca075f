#!/bin/bash
# Oracle for pyfix-intervals: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- spans
cat > spans/merge.py <<'LEGORL_EOF'
def merge(intervals):
    """Merge overlapping or touching [start, end] intervals."""
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return result


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))
LEGORL_EOF
