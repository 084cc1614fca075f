"""Records for the `py-bugfix` set (SWE-bench style), fed to `legorl.tasks.convert`.

Each repo is a small package with a visible test file (its tests become PASS_TO_PASS); the
test_patch adds hidden tests that fail on the buggy code (FAIL_TO_PASS). Gold patches are either
whole fixed files or unified diffs, so both converter paths stay exercised.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from typing import Any


def D(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


def make(name: str, statement: str, src: dict[str, str], fixes: dict[str, list[tuple[str, str]]],
         header: str, p2p: str, f2p: str, diff: bool = False) -> dict[str, Any]:
    test_file = f"tests/test_{name}.py"
    fixed = {}
    for path, pairs in fixes.items():
        text = src[path]
        for old, new in pairs:
            assert text.count(old) == 1, (name, path, old)
            text = text.replace(old, new)
        fixed[path] = text
    if diff:
        patch: Any = "".join(
            "".join(difflib.unified_diff(src[p].splitlines(True), fixed[p].splitlines(True), f"a/{p}", f"b/{p}"))
            for p in sorted(fixed))
    else:
        patch = fixed
    visible = D(header) + "\n\n" + D(p2p)
    hidden = visible + "\n\n" + D(f2p)
    ids = lambda text: [f"{test_file}::{t}" for t in re.findall(r"^def (test_\w+)", text, re.M)]  # noqa: E731
    pkg = next(iter(src)).split("/")[0]
    return {
        "instance_id": f"pyfix-{name}",
        "repo": f"legorl-builtin/{pkg}",
        "problem_statement": D(statement),
        "snapshot": {**src, test_file: visible, "README.md": f"# {pkg}\n\nRun the tests with `python3 -m pytest`.\n"},
        "test_patch": {test_file: hidden},
        "FAIL_TO_PASS": ids(D(f2p)),
        "PASS_TO_PASS": ids(D(p2p)),
        "patch": patch,
        "agent_timeout_sec": 900,
        "verifier_timeout_sec": 120,
        "metadata": {"difficulty": "medium", "set": "py-bugfix"},
    }


RECORDS: list[dict[str, Any]] = []

RECORDS.append(make(
    "roman",
    """
    `romanum.to_roman` produces non-standard numerals: `to_roman(4)` returns `IIII` and
    `to_roman(1994)` returns `MDCCCCLXXXXIIII` instead of `IV` and `MCMXCIV`.
    Numbers should use subtractive notation, and `from_roman(to_roman(n)) == n` for 1..3999.
    """,
    {"romanum/__init__.py": "from romanum.convert import from_roman, to_roman\n",
     "romanum/convert.py": D('''
        _TABLE = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]
        _VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}


        def to_roman(n: int) -> str:
            if not 0 < n < 4000:
                raise ValueError(f"out of range: {n}")
            out = []
            for value, symbol in _TABLE:
                while n >= value:
                    out.append(symbol)
                    n -= value
            return "".join(out)


        def from_roman(s: str) -> int:
            total = 0
            for i, ch in enumerate(s):
                value = _VALUES[ch]
                if i + 1 < len(s) and _VALUES[s[i + 1]] > value:
                    total -= value
                else:
                    total += value
            return total
        ''')},
    {"romanum/convert.py": [('(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")',
                             '(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n'
                             '          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")')]},
    "import pytest\n\nfrom romanum import from_roman, to_roman",
    """
    def test_simple():
        assert to_roman(8) == "VIII"
        assert to_roman(3000) == "MMM"

    def test_from_roman():
        assert from_roman("XIV") == 14
        assert from_roman("MCMXCIV") == 1994

    def test_range():
        with pytest.raises(ValueError):
            to_roman(0)

    def test_roundtrip():
        assert all(from_roman(to_roman(n)) == n for n in range(1, 4000))
    """,
    """
    def test_subtractive():
        assert to_roman(4) == "IV"
        assert to_roman(9) == "IX"
        assert to_roman(1994) == "MCMXCIV"
    """,
    diff=True,
))

RECORDS.append(make(
    "intervals",
    """
    `spans.merge` misses overlaps: `merge([[8, 10], [1, 3], [2, 6]])` returns the input almost
    unchanged, and intervals that only touch (`[1, 2]` and `[2, 3]`) are not joined.
    Expected: sorted, non-overlapping intervals covering the same points.
    """,
    {"spans/__init__.py": "from spans.merge import merge, total_length\n",
     "spans/merge.py": D('''
        def merge(intervals):
            """Merge overlapping or touching [start, end] intervals."""
            result = []
            for start, end in intervals:
                if result and start < result[-1][1]:
                    result[-1][1] = max(result[-1][1], end)
                else:
                    result.append([start, end])
            return result


        def total_length(intervals):
            return sum(end - start for start, end in merge(intervals))
        ''')},
    {"spans/merge.py": [("for start, end in intervals:", "for start, end in sorted(intervals):"),
                        ("start < result[-1][1]", "start <= result[-1][1]")]},
    "from spans import merge, total_length",
    """
    def test_sorted_overlap():
        assert merge([[1, 3], [2, 6], [8, 10]]) == [[1, 6], [8, 10]]

    def test_empty():
        assert merge([]) == []
    """,
    """
    def test_unsorted():
        assert merge([[8, 10], [1, 3], [2, 6]]) == [[1, 6], [8, 10]]

    def test_touching():
        assert merge([[1, 2], [2, 3]]) == [[1, 3]]

    def test_total_length():
        assert total_length([[5, 7], [1, 4], [3, 6]]) == 6
    """,
))

RECORDS.append(make(
    "lru",
    """
    `cachekit.LRUCache` does not behave like an LRU cache: after filling it, inserting a new key
    drops the key that was just inserted, and reading a key does not protect it from eviction.
    """,
    {"cachekit/__init__.py": "from cachekit.lru import LRUCache\n",
     "cachekit/lru.py": D('''
        from collections import OrderedDict


        class LRUCache:
            """Keeps at most `capacity` entries, evicting the least recently used."""

            def __init__(self, capacity: int):
                if capacity < 1:
                    raise ValueError("capacity must be >= 1")
                self.capacity = capacity
                self._data = OrderedDict()

            def get(self, key, default=None):
                if key not in self._data:
                    return default
                return self._data[key]

            def put(self, key, value):
                self._data[key] = value
                self._data.move_to_end(key)
                if len(self._data) > self.capacity:
                    self._data.popitem(last=True)

            def __contains__(self, key):
                return key in self._data

            def __len__(self):
                return len(self._data)
        ''')},
    {"cachekit/lru.py": [("        return self._data[key]\n",
                          "        self._data.move_to_end(key)\n        return self._data[key]\n"),
                         ("popitem(last=True)", "popitem(last=False)")]},
    "import pytest\n\nfrom cachekit import LRUCache",
    """
    def test_put_get():
        c = LRUCache(2)
        c.put("a", 1)
        assert c.get("a") == 1
        assert c.get("zz", 5) == 5

    def test_capacity():
        c = LRUCache(2)
        for k in "abc":
            c.put(k, k)
        assert len(c) == 2

    def test_bad_capacity():
        with pytest.raises(ValueError):
            LRUCache(0)
    """,
    """
    def test_evicts_oldest():
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.put("c", 3)
        assert "a" not in c and "c" in c

    def test_get_refreshes():
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.get("a")
        c.put("c", 3)
        assert "a" in c and "b" not in c
    """,
))

RECORDS.append(make(
    "wordfreq",
    """
    `textstats.words` does not split on newlines or tabs, so `word_counts("a b\\na")` reports a
    word `"b\\na"`; tab-separated words are glued together the same way.
    """,
    {"textstats/__init__.py": "from textstats.core import top_words, word_counts, words\n",
     "textstats/core.py": D('''
        from collections import Counter

        PUNCT = ".,!?;:\\"'()"


        def words(text: str) -> list[str]:
            """Lower-cased words of `text`, punctuation stripped."""
            return [w.strip(PUNCT) for w in text.lower().split(" ") if w.strip(PUNCT)]


        def word_counts(text: str) -> dict[str, int]:
            return dict(Counter(words(text)))


        def top_words(text: str, n: int) -> list[str]:
            return [w for w, _ in Counter(words(text)).most_common(n)]
        ''')},
    {"textstats/core.py": [('text.lower().split(" ")', "text.lower().split()")]},
    "from textstats import top_words, word_counts, words",
    """
    def test_punctuation():
        assert words("Hello, world!") == ["hello", "world"]

    def test_top_words():
        assert top_words("b a b c b a", 2) == ["b", "a"]
    """,
    """
    def test_whitespace_kinds():
        assert words("one\\ntwo\\tthree") == ["one", "two", "three"]

    def test_counts_multiline():
        assert word_counts("a b\\na") == {"a": 2, "b": 1}
    """,
))
