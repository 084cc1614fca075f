from rowparse import parse_rows, split_line

def test_plain():
    assert split_line("a, b ,c") == ["a", "b", "c"]

def test_rows():
    assert parse_rows("name,age\nann,30\n") == [{"name": "ann", "age": "30"}]


def test_quoted_separator():
    assert split_line('a,"b,c",d') == ["a", "b,c", "d"]

def test_escaped_quote():
    assert split_line('"say ""hi""",x') == ['say "hi"', "x"]

def test_rows_quoted():
    assert parse_rows('city,note\nParis,"big, old"') == [{"city": "Paris", "note": "big, old"}]
