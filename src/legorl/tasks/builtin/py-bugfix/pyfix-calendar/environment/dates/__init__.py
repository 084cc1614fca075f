from dates.calendar import day_of_year, days_in_month, is_leap
