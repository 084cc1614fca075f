from graphs import shortest_path

def test_chain():
    assert shortest_path({"a": ["b"], "b": ["c"]}, "a", "c") == 2

def test_unreachable():
    assert shortest_path({"a": ["b"], "c": []}, "a", "c") == -1

def test_same_node():
    assert shortest_path({}, "x", "x") == 0


def test_prefers_short_branch():
    g = {"a": ["short", "long1"], "short": ["goal"], "long1": ["long2"], "long2": ["goal"]}
    assert shortest_path(g, "a", "goal") == 2

def test_direct_edge_wins():
    g = {"s": ["t1", "m"], "m": ["n"], "n": ["t"], "t1": ["t"], "t": []}
    assert shortest_path(g, "s", "t") == 2
