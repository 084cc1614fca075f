from urllib.parse import unquote


def _decode(s: str) -> str:
    return unquote(s)


def parse_query(qs: str) -> dict[str, list[str]]:
    """'a=1&b=2&a=3' -> {'a': ['1', '3'], 'b': ['2']}."""
    result: dict[str, list[str]] = {}
    for pair in qs.lstrip("?").split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        result[_decode(key)] = [_decode(value)]
    return result


def get_one(qs: str, key: str, default=None):
    values = parse_query(qs).get(key)
    return values[0] if values else default
