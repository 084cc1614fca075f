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


def test_even():
    assert median([1, 2, 3, 4]) == 2.5
    assert median([4, 1, 3, 2]) == 2.5
