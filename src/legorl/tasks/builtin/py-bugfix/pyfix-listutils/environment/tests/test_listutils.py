import pytest

from listkit import chunks, dedupe, flatten

def test_even_chunks():
    assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
    assert chunks([], 3) == []

def test_bad_size():
    with pytest.raises(ValueError):
        chunks([1], 0)

def test_flatten_numbers():
    assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]

def test_dedupe_contents():
    assert sorted(dedupe([3, 1, 3, 2])) == [1, 2, 3]
