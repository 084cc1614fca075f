import pytest

from dates import day_of_year, days_in_month, is_leap

def test_common_years():
    assert is_leap(2024) and not is_leap(2023)

def test_days():
    assert days_in_month(2023, 2) == 28
    assert day_of_year(2023, 1, 31) == 31
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
