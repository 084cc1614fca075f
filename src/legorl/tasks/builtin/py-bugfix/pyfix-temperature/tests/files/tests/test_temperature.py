import pytest

from thermo import c_to_f, convert, f_to_c

def test_c_to_f():
    assert c_to_f(100) == 212

def test_c_to_k():
    assert convert(0, "C", "K") == pytest.approx(273.15)

def test_unknown_unit():
    with pytest.raises(ValueError):
        convert(1, "C", "X")


def test_f_to_c():
    assert f_to_c(212) == pytest.approx(100)
    assert f_to_c(32) == pytest.approx(0)

def test_f_to_k():
    assert convert(32, "F", "K") == pytest.approx(273.15)
