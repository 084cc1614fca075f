"""Small helpers."""


def sum_valeus(items):
    return sum(int(x) for x in items)
