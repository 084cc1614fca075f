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
