from wraptext import fill, wrap

def test_basic():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]

def test_long_word():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]
