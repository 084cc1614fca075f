import pytest

from dates import day_of_year, days_in_month, is_leap

def test_common_years():
    assert is_leap(2024) and not is_leap(2023)

def test_days():
    assert days_in_month(2023, 2) == 28
    assert day_of_year(2023, 1, 31) == 31
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_centuries():
    assert not is_leap(1900)
    assert is_leap(2000)

def test_day_of_year_1900():
    assert day_of_year(1900, 3, 1) == 60
