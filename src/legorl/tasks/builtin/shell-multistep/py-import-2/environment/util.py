"""Small helpers."""


def totl_of(items):
    return sum(int(x) for x in items)
