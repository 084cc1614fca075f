import operator

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def evaluate(expr: str) -> float:
    """Evaluate a reverse-Polish expression like '3 4 + 2 *'."""
    stack: list[float] = []
    for tok in expr.split():
        if tok in OPS:
            if len(stack) < 2:
                raise ValueError(f"not enough operands for {tok}")
            a = stack.pop()
            b = stack.pop()
            stack.append(OPS[tok](a, b))
        else:
            stack.append(float(tok))
    if len(stack) != 1:
        raise ValueError("malformed expression")
    return stack[0]
