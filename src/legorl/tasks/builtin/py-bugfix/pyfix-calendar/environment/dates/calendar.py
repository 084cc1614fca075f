_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year: int) -> bool:
    return year % 4 == 0


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"bad month {month}")
    return 29 if month == 2 and is_leap(year) else _DAYS[month - 1]


def day_of_year(year: int, month: int, day: int) -> int:
    return sum(days_in_month(year, m) for m in range(1, month)) + day
