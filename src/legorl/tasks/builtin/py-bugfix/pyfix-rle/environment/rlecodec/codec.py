from itertools import groupby


def encode(text: str) -> str:
    """'aaabcc' -> '3a1b2c'."""
    return "".join(f"{len(list(group))}{ch}" for ch, group in groupby(text))


def decode(data: str) -> str:
    out = []
    for i in range(0, len(data), 2):
        out.append(data[i + 1] * int(data[i]))
    return "".join(out)
