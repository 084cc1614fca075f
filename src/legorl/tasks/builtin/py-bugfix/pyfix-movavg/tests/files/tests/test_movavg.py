import pytest

from series import moving_average, windows

def test_bad_size():
    with pytest.raises(ValueError):
        moving_average([1, 2], 0)

def test_too_short():
    assert moving_average([1, 2], 3) == []


def test_all_windows():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]

def test_single_window():
    assert moving_average([1, 2, 3], 3) == [2.0]
    assert windows([1, 2, 3], 3) == [[1, 2, 3]]
