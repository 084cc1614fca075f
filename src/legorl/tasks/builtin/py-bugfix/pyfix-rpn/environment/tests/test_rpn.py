import pytest

from rpncalc import evaluate

def test_add_mul():
    assert evaluate("3 4 + 2 *") == 14

def test_errors():
    with pytest.raises(ValueError):
        evaluate("1 +")
    with pytest.raises(ValueError):
        evaluate("1 2")
