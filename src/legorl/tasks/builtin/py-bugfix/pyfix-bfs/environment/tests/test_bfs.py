from graphs import shortest_path

def test_chain():
    assert shortest_path({"a": ["b"], "b": ["c"]}, "a", "c") == 2

def test_unreachable():
    assert shortest_path({"a": ["b"], "c": []}, "a", "c") == -1

def test_same_node():
    assert shortest_path({}, "x", "x") == 0
