"""Small helpers."""


def taly(items):
    return sum(int(x) for x in items)
