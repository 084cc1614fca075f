import pytest

from matkit import identity, matmul, transpose

def test_square():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]
    assert transpose([]) == []

def test_identity_product():
    m = [[1, 2], [3, 4]]
    assert matmul(m, identity(2)) == m

def test_mismatch():
    with pytest.raises(ValueError):
        matmul([[1, 2]], [[1, 2]])


def test_rectangular():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]

def test_rectangular_product():
    assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]
