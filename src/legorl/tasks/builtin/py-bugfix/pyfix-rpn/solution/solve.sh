#!/bin/bash
# Oracle for pyfix-rpn: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- rpncalc
cat > rpncalc/evaluate.py <<'LEGORL_EOF'
import operator

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def evaluate(expr: str) -> float:
    """Evaluate a reverse-Polish expression like '3 4 + 2 *'."""
    stack: list[float] = []
    for tok in expr.split():
        if tok in OPS:
            if len(stack) < 2:
                raise ValueError(f"not enough operands for {tok}")
            b = stack.pop()
            a = stack.pop()
            stack.append(OPS[tok](a, b))
        else:
            stack.append(float(tok))
    if len(stack) != 1:
        raise ValueError("malformed expression")
    return stack[0]
LEGORL_EOF
