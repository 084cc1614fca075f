"""Small helpers."""


def add_al(items):
    return sum(int(x) for x in items)
