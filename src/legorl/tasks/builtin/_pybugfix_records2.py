"""More py-bugfix records (split for file size); see `_pybugfix_records.py`."""

from __future__ import annotations

from _pybugfix_records import RECORDS, D, make

RECORDS.append(make(
    "semver",
    """
    `verlib.compare("1.10.0", "1.9.0")` returns -1, and `max_version` picks `1.9.3` over
    `1.10.0`. Versions must compare numerically, part by part.
    """,
    {"verlib/__init__.py": "from verlib.version import compare, max_version, parse\n",
     "verlib/version.py": D('''
        def parse(version: str):
            """'v1.2.3' -> (1, 2, 3)."""
            parts = version.strip().lstrip("v").split(".")
            if len(parts) != 3:
                raise ValueError(f"not MAJOR.MINOR.PATCH: {version!r}")
            return tuple(parts)


        def compare(a: str, b: str) -> int:
            pa, pb = parse(a), parse(b)
            return (pa > pb) - (pa < pb)


        def max_version(versions):
            return max(versions, key=parse)
        ''')},
    {"verlib/version.py": [("return tuple(parts)", "return tuple(int(p) for p in parts)")]},
    "import pytest\n\nfrom verlib import compare, max_version, parse",
    """
    def test_equal():
        assert compare("1.2.3", "v1.2.3") == 0

    def test_major():
        assert compare("2.0.0", "1.9.9") == 1

    def test_bad():
        with pytest.raises(ValueError):
            parse("1.2")
    """,
    """
    def test_numeric_minor():
        assert compare("1.10.0", "1.9.0") == 1

    def test_max_version():
        assert max_version(["1.2.0", "1.10.0", "1.9.3"]) == "1.10.0"

    def test_parse_ints():
        assert parse("1.2.3") == (1, 2, 3)
    """,
    diff=True,
))

RECORDS.append(make(
    "rle",
    """
    `rlecodec.decode` breaks on runs longer than 9: `decode("12a1b")` raises instead of
    returning twelve `a` followed by `b`, so `decode(encode(s))` is not always `s`.
    """,
    {"rlecodec/__init__.py": "from rlecodec.codec import decode, encode\n",
     "rlecodec/codec.py": D('''
        from itertools import groupby


        def encode(text: str) -> str:
            """'aaabcc' -> '3a1b2c'."""
            return "".join(f"{len(list(group))}{ch}" for ch, group in groupby(text))


        def decode(data: str) -> str:
            out = []
            for i in range(0, len(data), 2):
                out.append(data[i + 1] * int(data[i]))
            return "".join(out)
        ''')},
    {"rlecodec/codec.py": [("from itertools import groupby\n", "import re\nfrom itertools import groupby\n"),
                           ("""    out = []
    for i in range(0, len(data), 2):
        out.append(data[i + 1] * int(data[i]))
    return "".join(out)""", """    return "".join(ch * int(count) for count, ch in re.findall(r"(\\d+)(\\D)", data))""")]},
    "from rlecodec import decode, encode",
    """
    def test_encode():
        assert encode("aaabcc") == "3a1b2c"
        assert encode("") == ""

    def test_decode_short():
        assert decode("3a1b2c") == "aaabcc"
    """,
    """
    def test_decode_long_run():
        assert decode("12a1b") == "a" * 12 + "b"

    def test_roundtrip():
        text = "x" * 15 + "yz" + "w" * 10
        assert decode(encode(text)) == text
    """,
    diff=True,
))

RECORDS.append(make(
    "bank",
    """
    Two problems in `ledger.Account`: `withdraw(-50)` silently increases the balance, and a
    `transfer` that fails for lack of funds still credits the other account.
    """,
    {"ledger/__init__.py": "from ledger.account import Account, InsufficientFunds\n",
     "ledger/account.py": D('''
        class InsufficientFunds(Exception):
            pass


        class Account:
            def __init__(self, owner: str, balance: int = 0):
                self.owner = owner
                self.balance = balance

            def deposit(self, amount: int) -> None:
                if amount <= 0:
                    raise ValueError("deposit must be positive")
                self.balance += amount

            def withdraw(self, amount: int) -> None:
                if amount > self.balance:
                    raise InsufficientFunds(f"{self.owner} has {self.balance}, needs {amount}")
                self.balance -= amount

            def transfer(self, other: "Account", amount: int) -> None:
                other.deposit(amount)
                self.withdraw(amount)
        ''')},
    {"ledger/account.py": [("""    def withdraw(self, amount: int) -> None:
""", """    def withdraw(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
"""), ("""        other.deposit(amount)
        self.withdraw(amount)""", """        self.withdraw(amount)
        other.deposit(amount)""")]},
    "import pytest\n\nfrom ledger import Account, InsufficientFunds",
    """
    def test_deposit_withdraw():
        a = Account("ann", 10)
        a.deposit(5)
        a.withdraw(3)
        assert a.balance == 12

    def test_overdraw():
        with pytest.raises(InsufficientFunds):
            Account("bob", 1).withdraw(2)

    def test_transfer():
        a, b = Account("a", 10), Account("b")
        a.transfer(b, 4)
        assert (a.balance, b.balance) == (6, 4)
    """,
    """
    def test_negative_withdraw():
        with pytest.raises(ValueError):
            Account("c", 10).withdraw(-50)

    def test_failed_transfer_changes_nothing():
        a, b = Account("a", 1), Account("b", 0)
        with pytest.raises(InsufficientFunds):
            a.transfer(b, 5)
        assert (a.balance, b.balance) == (1, 0)
    """,
))

RECORDS.append(make(
    "temperature",
    """
    `thermo.f_to_c(212)` returns 194.2 instead of 100, and every conversion from Fahrenheit
    through `thermo.convert` is wrong as a result.
    """,
    {"thermo/__init__.py": "from thermo.units import c_to_f, convert, f_to_c\n",
     "thermo/units.py": D('''
        def c_to_f(c: float) -> float:
            return c * 9 / 5 + 32


        def f_to_c(f: float) -> float:
            return f - 32 * 5 / 9


        _TO_C = {"C": lambda v: v, "F": f_to_c, "K": lambda v: v - 273.15}
        _FROM_C = {"C": lambda v: v, "F": c_to_f, "K": lambda v: v + 273.15}


        def convert(value: float, from_unit: str, to_unit: str) -> float:
            if from_unit not in _TO_C or to_unit not in _FROM_C:
                raise ValueError(f"unknown unit: {from_unit} or {to_unit}")
            return _FROM_C[to_unit](_TO_C[from_unit](value))
        ''')},
    {"thermo/units.py": [("return f - 32 * 5 / 9", "return (f - 32) * 5 / 9")]},
    "import pytest\n\nfrom thermo import c_to_f, convert, f_to_c",
    """
    def test_c_to_f():
        assert c_to_f(100) == 212

    def test_c_to_k():
        assert convert(0, "C", "K") == pytest.approx(273.15)

    def test_unknown_unit():
        with pytest.raises(ValueError):
            convert(1, "C", "X")
    """,
    """
    def test_f_to_c():
        assert f_to_c(212) == pytest.approx(100)
        assert f_to_c(32) == pytest.approx(0)

    def test_f_to_k():
        assert convert(32, "F", "K") == pytest.approx(273.15)
    """,
))

RECORDS.append(make(
    "inventory",
    """
    After removing the last unit of an item, `Inventory.items()` still lists it (with 0 stock),
    and `remove(item, 0)` or a negative quantity is accepted instead of raising `ValueError`.
    """,
    {"stock/__init__.py": "from stock.errors import OutOfStock\nfrom stock.inventory import Inventory\n",
     "stock/errors.py": D('''
        class OutOfStock(Exception):
            def __init__(self, item: str, have: int, want: int):
                super().__init__(f"{item}: have {have}, want {want}")
                self.item, self.have, self.want = item, have, want
        '''),
     "stock/inventory.py": D('''
        from stock.errors import OutOfStock


        class Inventory:
            def __init__(self):
                self._stock: dict[str, int] = {}

            def add(self, item: str, qty: int = 1) -> None:
                if qty <= 0:
                    raise ValueError("quantity must be positive")
                self._stock[item] = self._stock.get(item, 0) + qty

            def remove(self, item: str, qty: int = 1) -> None:
                have = self._stock.get(item, 0)
                if qty > have:
                    raise OutOfStock(item, have, qty)
                self._stock[item] = have - qty

            def count(self, item: str) -> int:
                return self._stock.get(item, 0)

            def items(self) -> list[str]:
                return sorted(self._stock)
        ''')},
    {"stock/inventory.py": [("""        have = self._stock.get(item, 0)
        if qty > have:
            raise OutOfStock(item, have, qty)
        self._stock[item] = have - qty""", """        if qty <= 0:
            raise ValueError("quantity must be positive")
        have = self._stock.get(item, 0)
        if qty > have:
            raise OutOfStock(item, have, qty)
        if qty == have:
            del self._stock[item]
        else:
            self._stock[item] = have - qty""")]},
    "import pytest\n\nfrom stock import Inventory, OutOfStock",
    """
    def test_add_count():
        inv = Inventory()
        inv.add("apple", 3)
        inv.remove("apple")
        assert inv.count("apple") == 2
        assert inv.items() == ["apple"]

    def test_out_of_stock():
        inv = Inventory()
        inv.add("pear")
        with pytest.raises(OutOfStock, match="have 1, want 2"):
            inv.remove("pear", 2)
    """,
    """
    def test_sold_out_not_listed():
        inv = Inventory()
        inv.add("apple", 2)
        inv.add("kiwi")
        inv.remove("apple", 2)
        assert inv.items() == ["kiwi"]

    def test_bad_quantity():
        inv = Inventory()
        inv.add("fig", 2)
        for qty in (0, -1):
            with pytest.raises(ValueError):
                inv.remove("fig", qty)
        assert inv.count("fig") == 2
    """,
))

RECORDS.append(make(
    "wordwrap",
    """
    `wraptext.wrap("aaa bbb", 7)` returns `["aaa", "bbb"]` although `"aaa bbb"` is exactly 7
    characters wide; lines that fit the width exactly are broken early.
    """,
    {"wraptext/__init__.py": "from wraptext.wrap import fill, wrap\n",
     "wraptext/wrap.py": D('''
        def wrap(text: str, width: int) -> list[str]:
            """Greedy word wrap; a word longer than width gets its own line."""
            if width < 1:
                raise ValueError("width must be >= 1")
            lines: list[str] = []
            current = ""
            for word in text.split():
                if not current:
                    current = word
                elif len(current) + 1 + len(word) >= width:
                    lines.append(current)
                    current = word
                else:
                    current += " " + word
            if current:
                lines.append(current)
            return lines


        def fill(text: str, width: int) -> str:
            return "\\n".join(wrap(text, width))
        ''')},
    {"wraptext/wrap.py": [(">= width", "> width")]},
    "from wraptext import fill, wrap",
    """
    def test_basic():
        assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]

    def test_long_word():
        assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]
    """,
    """
    def test_exact_fit():
        assert wrap("aaa bbb", 7) == ["aaa bbb"]

    def test_fill_exact():
        assert fill("ab cd ef", 5) == "ab cd\\nef"
    """,
))
