from matkit.ops import identity, matmul, transpose
