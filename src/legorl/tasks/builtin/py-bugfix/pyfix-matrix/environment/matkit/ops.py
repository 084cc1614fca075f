def transpose(m):
    return [[m[j][i] for j in range(len(m))] for i in range(len(m))]


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def matmul(a, b):
    if a and len(a[0]) != len(b):
        raise ValueError("shape mismatch")
    bt = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
