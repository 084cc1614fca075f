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


def test_nested_merge():
    base = {"db": {"host": "x", "port": 1}, "name": "app"}
    assert apply_overrides(base, ["db.port=2"]) == {"db": {"host": "x", "port": 2}, "name": "app"}

def test_deep_levels():
    merged = deep_merge({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 3}}})
    assert merged == {"a": {"b": {"c": 3, "d": 2}}}
