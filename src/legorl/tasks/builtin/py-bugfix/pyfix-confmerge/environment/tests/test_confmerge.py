import pytest

from confmerge import apply_overrides, deep_merge

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
