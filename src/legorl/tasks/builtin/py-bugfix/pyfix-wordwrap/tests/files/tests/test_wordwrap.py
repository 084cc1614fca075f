from wraptext import fill, wrap

def test_basic():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]

def test_long_word():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_exact_fit():
    assert wrap("aaa bbb", 7) == ["aaa bbb"]

def test_fill_exact():
    assert fill("ab cd ef", 5) == "ab cd\nef"
