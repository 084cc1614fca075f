from urlq import get_one, parse_query

def test_simple():
    assert parse_query("?x=1&y=%20z") == {"x": ["1"], "y": [" z"]}

def test_default():
    assert get_one("a=1", "b", "d") == "d"
    assert get_one("a=1", "a") == "1"
