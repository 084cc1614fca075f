"""More py-bugfix records (split for file size); see `_pybugfix_records.py`."""

from __future__ import annotations

import _pybugfix_records3  # noqa: F401  (appends its records first, keeping the order stable)
from _pybugfix_records import RECORDS, D, make

RECORDS.append(make(
    "confmerge",
    """
    `confmerge.apply_overrides({"db": {"host": "x", "port": 1}}, ["db.port=2"])` returns
    `{"db": {"port": 2}}`: the nested `host` key is lost. Nested tables should be merged key by
    key, and the input config must not be modified.
    """,
    {"confmerge/__init__.py": "from confmerge.merge import deep_merge\nfrom confmerge.overrides import apply_overrides\n",
     "confmerge/merge.py": D('''
        def deep_merge(base: dict, override: dict) -> dict:
            """A new dict: base updated with override (nested dicts merged)."""
            result = dict(base)
            for key, value in override.items():
                result[key] = value
            return result
        '''),
     "confmerge/overrides.py": D('''
        import json

        from confmerge.merge import deep_merge


        def _parse_value(text: str):
            try:
                return json.loads(text)
            except ValueError:
                return text


        def apply_overrides(config: dict, overrides: list[str]) -> dict:
            """Apply 'a.b.c=value' overrides (values parsed as JSON when possible)."""
            for item in overrides:
                path, sep, raw = item.partition("=")
                if not sep or not path:
                    raise ValueError(f"override must look like key.path=value: {item!r}")
                nested = _parse_value(raw)
                for key in reversed(path.split(".")):
                    nested = {key: nested}
                config = deep_merge(config, nested)
            return config
        ''')},
    {"confmerge/merge.py": [("""        result[key] = value""", """        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value""")]},
    "import pytest\n\nfrom confmerge import apply_overrides, deep_merge",
    """
    def test_flat():
        assert deep_merge({"a": 1, "b": 2}, {"b": 3, "c": 4}) == {"a": 1, "b": 3, "c": 4}

    def test_top_level_override():
        assert apply_overrides({"debug": False}, ["debug=true"]) == {"debug": True}

    def test_bad_override():
        with pytest.raises(ValueError):
            apply_overrides({}, ["novalue"])

    def test_base_untouched():
        base = {"db": {"host": "x"}}
        deep_merge(base, {"db": {"port": 5}})
        assert base == {"db": {"host": "x"}}
    """,
    """
    def test_nested_merge():
        base = {"db": {"host": "x", "port": 1}, "name": "app"}
        assert apply_overrides(base, ["db.port=2"]) == {"db": {"host": "x", "port": 2}, "name": "app"}

    def test_deep_levels():
        merged = deep_merge({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 3}}})
        assert merged == {"a": {"b": {"c": 3, "d": 2}}}
    """,
    diff=True,
))

RECORDS.append(make(
    "slugify",
    """
    `slugs.slugify("Hello, World!")` returns `hello--world-` instead of `hello-world`. Runs of
    non-alphanumeric characters should become one dash, with no dash at either end.
    """,
    {"slugs/__init__.py": "from slugs.slug import slugify, unique_slug\n",
     "slugs/slug.py": D('''
        import re


        def slugify(text: str) -> str:
            text = text.lower()
            return re.sub(r"[^a-z0-9]", "-", text)


        def unique_slug(text: str, existing: set[str]) -> str:
            base = slugify(text)
            slug, n = base, 2
            while slug in existing:
                slug = f"{base}-{n}"
                n += 1
            return slug
        ''')},
    {"slugs/slug.py": [('return re.sub(r"[^a-z0-9]", "-", text)', 'return re.sub(r"[^a-z0-9]+", "-", text).strip("-")')]},
    "from slugs import slugify, unique_slug",
    """
    def test_plain():
        assert slugify("abc") == "abc"
        assert slugify("Python3") == "python3"

    def test_unique():
        assert unique_slug("post", {"post", "post-2"}) == "post-3"
    """,
    """
    def test_punctuation():
        assert slugify("Hello, World!") == "hello-world"

    def test_spaces():
        assert slugify("  a  b ") == "a-b"

    def test_unique_with_punctuation():
        assert unique_slug("Hi!", {"hi"}) == "hi-2"
    """,
))

RECORDS.append(make(
    "calendar",
    """
    `dates.is_leap(1900)` returns True, so `day_of_year(1900, 3, 1)` is 61 instead of 60.
    Century years are leap years only when divisible by 400.
    """,
    {"dates/__init__.py": "from dates.calendar import day_of_year, days_in_month, is_leap\n",
     "dates/calendar.py": D('''
        _DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


        def is_leap(year: int) -> bool:
            return year % 4 == 0


        def days_in_month(year: int, month: int) -> int:
            if not 1 <= month <= 12:
                raise ValueError(f"bad month {month}")
            return 29 if month == 2 and is_leap(year) else _DAYS[month - 1]


        def day_of_year(year: int, month: int, day: int) -> int:
            return sum(days_in_month(year, m) for m in range(1, month)) + day
        ''')},
    {"dates/calendar.py": [("return year % 4 == 0", "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)")]},
    "import pytest\n\nfrom dates import day_of_year, days_in_month, is_leap",
    """
    def test_common_years():
        assert is_leap(2024) and not is_leap(2023)

    def test_days():
        assert days_in_month(2023, 2) == 28
        assert day_of_year(2023, 1, 31) == 31
        with pytest.raises(ValueError):
            days_in_month(2023, 13)
    """,
    """
    def test_centuries():
        assert not is_leap(1900)
        assert is_leap(2000)

    def test_day_of_year_1900():
        assert day_of_year(1900, 3, 1) == 60
    """,
))

RECORDS.append(make(
    "matrix",
    """
    `matkit.transpose([[1, 2, 3], [4, 5, 6]])` returns `[[1, 4], [2, 5]]`, silently dropping a
    column; non-square matrices are not transposed correctly.
    """,
    {"matkit/__init__.py": "from matkit.ops import identity, matmul, transpose\n",
     "matkit/ops.py": D('''
        def transpose(m):
            return [[m[j][i] for j in range(len(m))] for i in range(len(m))]


        def identity(n):
            return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


        def matmul(a, b):
            if a and len(a[0]) != len(b):
                raise ValueError("shape mismatch")
            bt = transpose(b)
            return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
        ''')},
    {"matkit/ops.py": [("    return [[m[j][i] for j in range(len(m))] for i in range(len(m))]",
                        "    if not m:\n        return []\n"
                        "    return [[m[j][i] for j in range(len(m))] for i in range(len(m[0]))]")]},
    "import pytest\n\nfrom matkit import identity, matmul, transpose",
    """
    def test_square():
        assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]
        assert transpose([]) == []

    def test_identity_product():
        m = [[1, 2], [3, 4]]
        assert matmul(m, identity(2)) == m

    def test_mismatch():
        with pytest.raises(ValueError):
            matmul([[1, 2]], [[1, 2]])
    """,
    """
    def test_rectangular():
        assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]

    def test_rectangular_product():
        assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]
    """,
))

RECORDS.append(make(
    "csvsplit",
    """
    `rowparse.split_line('a,"b,c",d')` returns four fields; quoted fields containing the
    separator must stay one field, and `""` inside quotes means a literal quote.
    """,
    {"rowparse/__init__.py": "from rowparse.split import parse_rows, split_line\n",
     "rowparse/split.py": D('''
        def split_line(line: str, sep: str = ",") -> list[str]:
            """Fields of one delimited line, whitespace-stripped."""
            return [field.strip() for field in line.split(sep)]


        def parse_rows(text: str, sep: str = ",") -> list[dict[str, str]]:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if not lines:
                return []
            header = split_line(lines[0], sep)
            return [dict(zip(header, split_line(ln, sep))) for ln in lines[1:]]
        ''')},
    {"rowparse/split.py": [("""    return [field.strip() for field in line.split(sep)]""", """    fields, buf, quoted, i = [], [], False, 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"' and line[i + 1:i + 2] == '"':
                buf.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                buf.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == sep:
            fields.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        i += 1
    fields.append("".join(buf).strip())
    return fields""")]},
    "from rowparse import parse_rows, split_line",
    """
    def test_plain():
        assert split_line("a, b ,c") == ["a", "b", "c"]

    def test_rows():
        assert parse_rows("name,age\\nann,30\\n") == [{"name": "ann", "age": "30"}]
    """,
    '''
    def test_quoted_separator():
        assert split_line('a,"b,c",d') == ["a", "b,c", "d"]

    def test_escaped_quote():
        assert split_line('"say ""hi""",x') == ['say "hi"', "x"]

    def test_rows_quoted():
        assert parse_rows('city,note\\nParis,"big, old"') == [{"city": "Paris", "note": "big, old"}]
    ''',
    diff=True,
))

RECORDS.append(make(
    "scheduler",
    """
    `jobq.Scheduler` crashes with `TypeError: '<' not supported between instances of 'dict'
    and 'dict'` when two jobs share a priority, and jobs of equal priority do not come out in
    the order they were pushed (first in, first out).
    """,
    {"jobq/__init__.py": "from jobq.scheduler import Scheduler\n",
     "jobq/scheduler.py": D('''
        import heapq


        class Scheduler:
            """Pops the job with the lowest priority number first."""

            def __init__(self):
                self._heap = []

            def push(self, priority: int, job) -> None:
                heapq.heappush(self._heap, (priority, job))

            def pop(self):
                if not self._heap:
                    raise IndexError("pop from an empty scheduler")
                return heapq.heappop(self._heap)[-1]

            def __len__(self):
                return len(self._heap)
        ''')},
    {"jobq/scheduler.py": [("import heapq\n", "import heapq\nimport itertools\n"),
                           ("        self._heap = []\n", "        self._heap = []\n        self._seq = itertools.count()\n"),
                           ("(priority, job)", "(priority, next(self._seq), job)")]},
    "import pytest\n\nfrom jobq import Scheduler",
    """
    def test_priority_order():
        s = Scheduler()
        s.push(2, "b")
        s.push(1, "a")
        assert [s.pop(), s.pop()] == ["a", "b"]
        assert len(s) == 0

    def test_empty():
        with pytest.raises(IndexError):
            Scheduler().pop()
    """,
    """
    def test_unorderable_jobs():
        s = Scheduler()
        s.push(1, {"id": 1})
        s.push(1, {"id": 2})
        assert s.pop() == {"id": 1}

    def test_fifo_ties():
        s = Scheduler()
        for name in ["z", "a", "m"]:
            s.push(5, name)
        assert [s.pop() for _ in range(3)] == ["z", "a", "m"]
    """,
))
