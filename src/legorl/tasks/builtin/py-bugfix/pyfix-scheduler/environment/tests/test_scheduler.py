import pytest

from jobq import Scheduler

def test_priority_order():
    s = Scheduler()
    s.push(2, "b")
    s.push(1, "a")
    assert [s.pop(), s.pop()] == ["a", "b"]
    assert len(s) == 0

def test_empty():
    with pytest.raises(IndexError):
        Scheduler().pop()
