import pytest

from verlib import compare, max_version, parse

def test_equal():
    assert compare("1.2.3", "v1.2.3") == 0

def test_major():
    assert compare("2.0.0", "1.9.9") == 1

def test_bad():
    with pytest.raises(ValueError):
        parse("1.2")


def test_numeric_minor():
    assert compare("1.10.0", "1.9.0") == 1

def test_max_version():
    assert max_version(["1.2.0", "1.10.0", "1.9.3"]) == "1.10.0"

def test_parse_ints():
    assert parse("1.2.3") == (1, 2, 3)
