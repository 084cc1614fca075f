from rowparse import parse_rows, split_line

def test_plain():
    assert split_line("a, b ,c") == ["a", "b", "c"]

def test_rows():
    assert parse_rows("name,age\nann,30\n") == [{"name": "ann", "age": "30"}]
