def split_line(line: str, sep: str = ",") -> list[str]:
    """Fields of one delimited line, whitespace-stripped."""
    return [field.strip() for field in line.split(sep)]


def parse_rows(text: str, sep: str = ",") -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = split_line(lines[0], sep)
    return [dict(zip(header, split_line(ln, sep))) for ln in lines[1:]]
