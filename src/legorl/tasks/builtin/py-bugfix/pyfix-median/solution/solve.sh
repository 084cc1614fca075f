#!/bin/bash
# Oracle for pyfix-median: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- statkit
cat > statkit/basic.py <<'LEGORL_EOF'
def mean(xs):
    if not xs:
        raise ValueError("mean of empty data")
    return sum(xs) / len(xs)


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of empty data")
    if n % 2:
        return s[n // 2]
    return (s[n // 2 - 1] + s[n // 2]) / 2


def variance(xs):
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)
LEGORL_EOF
