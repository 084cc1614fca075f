from urlq import get_one, parse_query

def test_simple():
    assert parse_query("?x=1&y=%20z") == {"x": ["1"], "y": [" z"]}

def test_default():
    assert get_one("a=1", "b", "d") == "d"
    assert get_one("a=1", "a") == "1"


def test_repeated_keys():
    assert parse_query("a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}

def test_plus_is_space():
    assert parse_query("q=hello+world") == {"q": ["hello world"]}
