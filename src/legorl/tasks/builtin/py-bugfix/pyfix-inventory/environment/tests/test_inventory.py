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
