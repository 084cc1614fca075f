import pytest

from thermo import c_to_f, convert, f_to_c

def test_c_to_f():
    assert c_to_f(100) == 212

def test_c_to_k():
    assert convert(0, "C", "K") == pytest.approx(273.15)

def test_unknown_unit():
    with pytest.raises(ValueError):
        convert(1, "C", "X")
