import pytest

from stock import Inventory, OutOfStock

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
