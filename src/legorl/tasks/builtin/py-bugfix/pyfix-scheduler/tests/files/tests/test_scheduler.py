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
