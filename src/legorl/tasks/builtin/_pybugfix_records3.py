"""More py-bugfix records (split for file size); see `_pybugfix_records.py`."""

from __future__ import annotations

import _pybugfix_records2  # noqa: F401  (appends its records first, keeping the order stable)
from _pybugfix_records import RECORDS, D, make

RECORDS.append(make(
    "querystring",
    """
    `urlq.parse_query("a=1&a=2")` returns `{"a": ["2"]}`: repeated keys keep only the last value.
    Also `+` should decode to a space (`q=hello+world` gives `hello world`), as browsers send it.
    """,
    {"urlq/__init__.py": "from urlq.parse import get_one, parse_query\n",
     "urlq/parse.py": D('''
        from urllib.parse import unquote


        def _decode(s: str) -> str:
            return unquote(s)


        def parse_query(qs: str) -> dict[str, list[str]]:
            """'a=1&b=2&a=3' -> {'a': ['1', '3'], 'b': ['2']}."""
            result: dict[str, list[str]] = {}
            for pair in qs.lstrip("?").split("&"):
                if not pair:
                    continue
                key, _, value = pair.partition("=")
                result[_decode(key)] = [_decode(value)]
            return result


        def get_one(qs: str, key: str, default=None):
            values = parse_query(qs).get(key)
            return values[0] if values else default
        ''')},
    {"urlq/parse.py": [("return unquote(s)", 'return unquote(s.replace("+", " "))'),
                       ("result[_decode(key)] = [_decode(value)]",
                        "result.setdefault(_decode(key), []).append(_decode(value))")]},
    "from urlq import get_one, parse_query",
    """
    def test_simple():
        assert parse_query("?x=1&y=%20z") == {"x": ["1"], "y": [" z"]}

    def test_default():
        assert get_one("a=1", "b", "d") == "d"
        assert get_one("a=1", "a") == "1"
    """,
    """
    def test_repeated_keys():
        assert parse_query("a=1&b=2&a=3") == {"a": ["1", "3"], "b": ["2"]}

    def test_plus_is_space():
        assert parse_query("q=hello+world") == {"q": ["hello world"]}
    """,
))

RECORDS.append(make(
    "rpn",
    """
    `rpncalc.evaluate("10 4 -")` returns -6 and `evaluate("8 2 /")` returns 0.25: non-commutative
    operators get their operands the wrong way round.
    """,
    {"rpncalc/__init__.py": "from rpncalc.evaluate import evaluate\n",
     "rpncalc/evaluate.py": D('''
        import operator

        OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


        def evaluate(expr: str) -> float:
            """Evaluate a reverse-Polish expression like '3 4 + 2 *'."""
            stack: list[float] = []
            for tok in expr.split():
                if tok in OPS:
                    if len(stack) < 2:
                        raise ValueError(f"not enough operands for {tok}")
                    a = stack.pop()
                    b = stack.pop()
                    stack.append(OPS[tok](a, b))
                else:
                    stack.append(float(tok))
            if len(stack) != 1:
                raise ValueError("malformed expression")
            return stack[0]
        ''')},
    {"rpncalc/evaluate.py": [("            a = stack.pop()\n            b = stack.pop()\n",
                              "            b = stack.pop()\n            a = stack.pop()\n")]},
    "import pytest\n\nfrom rpncalc import evaluate",
    """
    def test_add_mul():
        assert evaluate("3 4 + 2 *") == 14

    def test_errors():
        with pytest.raises(ValueError):
            evaluate("1 +")
        with pytest.raises(ValueError):
            evaluate("1 2")
    """,
    """
    def test_subtract():
        assert evaluate("10 4 -") == 6

    def test_divide():
        assert evaluate("8 2 /") == 4
    """,
))

RECORDS.append(make(
    "movavg",
    """
    `series.moving_average([1, 2, 3, 4], 2)` returns `[1.5, 2.5]`: the last window is dropped,
    and `moving_average([1, 2, 3], 3)` returns `[]` instead of `[2.0]`.
    """,
    {"series/__init__.py": "from series.window import moving_average, windows\n",
     "series/window.py": D('''
        def windows(values, size):
            if size <= 0:
                raise ValueError("window size must be positive")
            return [values[i:i + size] for i in range(len(values) - size)]


        def moving_average(values, size):
            return [sum(w) / size for w in windows(values, size)]
        ''')},
    {"series/window.py": [("range(len(values) - size)", "range(len(values) - size + 1)")]},
    "import pytest\n\nfrom series import moving_average, windows",
    """
    def test_bad_size():
        with pytest.raises(ValueError):
            moving_average([1, 2], 0)

    def test_too_short():
        assert moving_average([1, 2], 3) == []
    """,
    """
    def test_all_windows():
        assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]

    def test_single_window():
        assert moving_average([1, 2, 3], 3) == [2.0]
        assert windows([1, 2, 3], 3) == [[1, 2, 3]]
    """,
))

RECORDS.append(make(
    "bfs",
    """
    `graphs.shortest_path` sometimes returns a longer path than necessary: with edges
    a->short->goal and a->long1->long2->goal it answers 3 instead of 2.
    """,
    {"graphs/__init__.py": "from graphs.search import shortest_path\n",
     "graphs/search.py": D('''
        from collections import deque


        def shortest_path(graph: dict, start, goal) -> int:
            """Edges on a shortest path from start to goal, or -1 if goal is unreachable."""
            if start == goal:
                return 0
            queue = deque([(start, 0)])
            seen = {start}
            while queue:
                node, dist = queue.pop()
                for nxt in graph.get(node, []):
                    if nxt == goal:
                        return dist + 1
                    if nxt not in seen:
                        seen.add(nxt)
                        queue.append((nxt, dist + 1))
            return -1
        ''')},
    {"graphs/search.py": [("queue.pop()", "queue.popleft()")]},
    "from graphs import shortest_path",
    """
    def test_chain():
        assert shortest_path({"a": ["b"], "b": ["c"]}, "a", "c") == 2

    def test_unreachable():
        assert shortest_path({"a": ["b"], "c": []}, "a", "c") == -1

    def test_same_node():
        assert shortest_path({}, "x", "x") == 0
    """,
    """
    def test_prefers_short_branch():
        g = {"a": ["short", "long1"], "short": ["goal"], "long1": ["long2"], "long2": ["goal"]}
        assert shortest_path(g, "a", "goal") == 2

    def test_direct_edge_wins():
        g = {"s": ["t1", "m"], "m": ["n"], "n": ["t"], "t1": ["t"], "t": []}
        assert shortest_path(g, "s", "t") == 2
    """,
))

RECORDS.append(make(
    "listutils",
    """
    Several bugs in `listkit`:
    - `chunks([1, 2, 3, 4, 5], 2)` drops the final partial chunk `[5]`;
    - `dedupe` does not keep the order of first appearance;
    - `flatten(["ab", ["c"]])` crashes with RecursionError; strings should be kept whole.
    """,
    {"listkit/__init__.py": "from listkit.ops import chunks, dedupe, flatten\n",
     "listkit/ops.py": D('''
        from collections.abc import Iterable


        def chunks(items, size):
            if size < 1:
                raise ValueError("size must be >= 1")
            return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]


        def dedupe(items):
            return list(set(items))


        def flatten(items):
            out = []
            for item in items:
                if isinstance(item, Iterable):
                    out.extend(flatten(item))
                else:
                    out.append(item)
            return out
        ''')},
    {"listkit/ops.py": [("range(0, len(items) - size + 1, size)", "range(0, len(items), size)"),
                        ("    return list(set(items))", "    return list(dict.fromkeys(items))"),
                        ("if isinstance(item, Iterable):",
                         "if isinstance(item, Iterable) and not isinstance(item, (str, bytes)):")]},
    "import pytest\n\nfrom listkit import chunks, dedupe, flatten",
    """
    def test_even_chunks():
        assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]
        assert chunks([], 3) == []

    def test_bad_size():
        with pytest.raises(ValueError):
            chunks([1], 0)

    def test_flatten_numbers():
        assert flatten([1, [2, [3, 4]], 5]) == [1, 2, 3, 4, 5]

    def test_dedupe_contents():
        assert sorted(dedupe([3, 1, 3, 2])) == [1, 2, 3]
    """,
    """
    def test_partial_chunk():
        assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]

    def test_dedupe_order():
        assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]

    def test_flatten_strings():
        assert flatten(["ab", ["c", ["de"]]]) == ["ab", "c", "de"]
    """,
))

RECORDS.append(make(
    "median",
    """
    `statkit.median([1, 2, 3, 4])` returns 3; for an even number of values the median is the
    mean of the two middle values (2.5 here).
    """,
    {"statkit/__init__.py": "from statkit.basic import mean, median, variance\n",
     "statkit/basic.py": D('''
        def mean(xs):
            if not xs:
                raise ValueError("mean of empty data")
            return sum(xs) / len(xs)


        def median(xs):
            s = sorted(xs)
            n = len(s)
            if n == 0:
                raise ValueError("median of empty data")
            return s[n // 2]


        def variance(xs):
            m = mean(xs)
            return sum((x - m) ** 2 for x in xs) / len(xs)
        ''')},
    {"statkit/basic.py": [("    return s[n // 2]\n",
                           "    if n % 2:\n        return s[n // 2]\n    return (s[n // 2 - 1] + s[n // 2]) / 2\n")]},
    "import pytest\n\nfrom statkit import mean, median, variance",
    """
    def test_odd():
        assert median([3, 1, 2]) == 2

    def test_mean_variance():
        assert mean([1, 2, 3]) == 2
        assert variance([1, 2, 3]) == pytest.approx(2 / 3)

    def test_empty():
        with pytest.raises(ValueError):
            median([])
    """,
    """
    def test_even():
        assert median([1, 2, 3, 4]) == 2.5
        assert median([4, 1, 3, 2]) == 2.5
    """,
))
