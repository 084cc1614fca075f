#!/bin/bash
# Oracle for pyfix-matrix: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- matkit
cat > matkit/ops.py <<'LEGORL_EOF'
def transpose(m):
    if not m:
        return []
    return [[m[j][i] for j in range(len(m))] for i in range(len(m[0]))]


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def matmul(a, b):
    if a and len(a[0]) != len(b):
        raise ValueError("shape mismatch")
    bt = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
LEGORL_EOF
