import pytest

from verlib import compare, max_version, parse

def test_equal():
    assert compare("1.2.3", "v1.2.3") == 0

def test_major():
    assert compare("2.0.0", "1.9.9") == 1

def test_bad():
    with pytest.raises(ValueError):
        parse("1.2")
