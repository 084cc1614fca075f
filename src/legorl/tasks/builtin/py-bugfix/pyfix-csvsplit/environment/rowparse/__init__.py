from rowparse.split import parse_rows, split_line
