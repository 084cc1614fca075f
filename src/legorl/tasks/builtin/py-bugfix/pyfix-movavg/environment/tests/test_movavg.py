import pytest

from series import moving_average, windows

def test_bad_size():
    with pytest.raises(ValueError):
        moving_average([1, 2], 0)

def test_too_short():
    assert moving_average([1, 2], 3) == []
