import pytest

from romanum import from_roman, to_roman

def test_simple():
    assert to_roman(8) == "VIII"
    assert to_roman(3000) == "MMM"

def test_from_roman():
    assert from_roman("XIV") == 14
    assert from_roman("MCMXCIV") == 1994

def test_range():
    with pytest.raises(ValueError):
        to_roman(0)

def test_roundtrip():
    assert all(from_roman(to_roman(n)) == n for n in range(1, 4000))
