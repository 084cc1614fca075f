"""`module:attr` extension points: a user's own class plugs in by import path, mistakes fail in one line."""

from __future__ import annotations

import sys
import textwrap

import pytest

from legorl.env import SANDBOXES, SandboxError, UnknownBackendError, make_sandbox, sandbox_class
from legorl.env.local import LocalSandbox
from legorl.plugins import load_object
from legorl.tasks.model import Task

USER_MODULE = textwrap.dedent('''
    class MySandbox:
        """A user's backend: the same (task, **opts) constructor as the built-in ones."""

        def __init__(self, task, **opts):
            self.task, self.opts = task, opts

    class Outer:
        class Inner:
            pass

    def make_thing():
        return 42
''')


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    """A package `userplug` that exists only in tmp_path (as a researcher's own code would)."""
    pkg = tmp_path / "userplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sandboxes.py").write_text(USER_MODULE)
    (pkg / "broken.py").write_text("raise RuntimeError('boom at import\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userplug"
    for name in [m for m in sys.modules if m == "userplug" or m.startswith("userplug.")]:
        del sys.modules[name]


def test_registered_names_and_values():
    marker = object()
    registry = {"direct": marker, "lazy": "textwrap:dedent"}
    assert load_object("direct", registry, "thing") is marker
    assert load_object("lazy", registry, "thing") is textwrap.dedent
    assert load_object("textwrap:dedent", registry, "thing") is textwrap.dedent  # unregistered path


def test_user_sandbox_by_import_path(user_pkg, tmp_path):
    task = Task(id="t", path=tmp_path, instruction="")
    sb = make_sandbox(task, backend=f"{user_pkg}.sandboxes:MySandbox", flavour="x")
    assert type(sb).__name__ == "MySandbox" and sb.task is task and sb.opts == {"flavour": "x"}
    assert load_object(f"{user_pkg}.sandboxes:Outer.Inner", {}, "thing").__name__ == "Inner"
    assert load_object(f"{user_pkg}.sandboxes:make_thing", {}, "estimator")() == 42


def test_builtin_backends_resolve():
    assert sandbox_class("local") is LocalSandbox
    assert sandbox_class("k8s") is sandbox_class("kubernetes")
    assert set(SANDBOXES) >= {"local", "docker", "kubernetes"}


def test_unknown_name_lists_choices():
    with pytest.raises(ValueError) as err:
        load_object("nope", {"b": "x:y", "a": "x:z"}, "sandbox")
    assert str(err.value) == "unknown sandbox 'nope': use one of a, b or 'module:Class'"
    with pytest.raises(UnknownBackendError, match="unknown sandbox backend 'nope': use one of docker, "):
        sandbox_class("nope")
    # one error for both kinds of caller: sandbox code catches SandboxError, config checks ValueError
    assert issubclass(UnknownBackendError, SandboxError) and issubclass(UnknownBackendError, ValueError)
    for bad in (":Cls", "mod:", ""):
        with pytest.raises(ValueError, match="unknown sandbox"):
            load_object(bad, {}, "sandbox")


def test_bad_module_or_attribute(user_pkg):
    with pytest.raises(ValueError, match=r"^cannot load sandbox 'no_such_mod:X': No module named 'no_such_mod'$"):
        load_object("no_such_mod:X", {}, "sandbox")
    with pytest.raises(ValueError, match=r"^cannot load sandbox 'userplug.sandboxes:Nope': .*Nope"):
        load_object(f"{user_pkg}.sandboxes:Nope", {}, "sandbox")
    # a module that fails while importing: one line, the original error kept as the cause
    with pytest.raises(ValueError, match=r"^cannot load sandbox 'userplug.broken:X': boom at import$") as err:
        load_object(f"{user_pkg}.broken:X", {}, "sandbox")
    assert isinstance(err.value.__cause__, RuntimeError)
    # a registered name whose target is broken says both
    with pytest.raises(ValueError, match=r"^cannot load scaffold 'mine' \(no_such_mod:X\): No module named"):
        load_object("mine", {"mine": "no_such_mod:X"}, "scaffold")
