import pytest

from statkit import mean, median, variance

def test_odd():
    assert median([3, 1, 2]) == 2

def test_mean_variance():
    assert mean([1, 2, 3]) == 2
    assert variance([1, 2, 3]) == pytest.approx(2 / 3)

def test_empty():
    with pytest.raises(ValueError):
        median([])
