import pytest

from cachekit import LRUCache

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
