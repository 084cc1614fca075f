"""Small helpers."""


def cuont_up(items):
    return sum(int(x) for x in items)
