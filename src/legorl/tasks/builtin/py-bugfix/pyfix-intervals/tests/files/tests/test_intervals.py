from spans import merge, total_length

def test_sorted_overlap():
    assert merge([[1, 3], [2, 6], [8, 10]]) == [[1, 6], [8, 10]]

def test_empty():
    assert merge([]) == []


def test_unsorted():
    assert merge([[8, 10], [1, 3], [2, 6]]) == [[1, 6], [8, 10]]

def test_touching():
    assert merge([[1, 2], [2, 3]]) == [[1, 3]]

def test_total_length():
    assert total_length([[5, 7], [1, 4], [3, 6]]) == 6
