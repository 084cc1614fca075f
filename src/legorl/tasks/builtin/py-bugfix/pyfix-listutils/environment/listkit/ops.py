from collections.abc import Iterable


def chunks(items, size):
    if size < 1:
        raise ValueError("size must be >= 1")
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]


def dedupe(items):
    return list(set(items))


def flatten(items):
    out = []
    for item in items:
        if isinstance(item, Iterable):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out
