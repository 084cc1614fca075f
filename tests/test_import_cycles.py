"""No import cycle among legorl's modules: the layers stay layers.

Static, from the source's import statements (nothing is imported). An import anywhere in a module
counts, inside functions and `if TYPE_CHECKING:` too: a deferred import that only hides a cycle
still ties the two modules. Edges from a module to its own parent packages are dropped (a package's
`__init__` re-exporting its children is not a design cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "legorl"


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every importable .py under src/package (a package is its
    __init__). Paths no import can name (the task data under tasks/builtin/py-bugfix/) are skipped."""
    mods = {}
    for f in sorted((src / package).rglob("*.py")):
        parts = f.relative_to(src).with_suffix("").parts
        if all(part.isidentifier() for part in parts):
            mods[".".join(parts).removesuffix(".__init__")] = f
    return mods


def imported_modules(cur: str, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> set[str]:
    """The package's modules one import statement in `cur` depends on."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: resolved against cur's package
            parts = cur.split(".")
            is_pkg = mods[cur].name == "__init__.py"
            parts = parts[: len(parts) - node.level + (1 if is_pkg else 0)]
            base = ".".join(parts + ([base] if base else []))
        names = [base] + [f"{base}.{a.name}" for a in node.names]  # `from pkg import module` too
    found = set()
    for name in names:
        while name and name not in mods:  # a name inside a module: the module itself
            name = name.rpartition(".")[0]
        if name and name != cur and (name == PACKAGE or name.startswith(PACKAGE + ".")):
            found.add(name)
    return found


def import_graph(src: Path = SRC, package: str = PACKAGE) -> dict[str, set[str]]:
    mods = module_files(src, package)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[mod] |= imported_modules(mod, node, mods)
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def test_detector_finds_cycles():
    """Tarjan over a hand-made graph: one three-module cycle, nothing else."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_detector_reads_deferred_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from legorl.sub import low\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "low.py").write_text("import legorl\n\ndef f():\n    from ..sub.high import g\n")
    (pkg / "sub" / "high.py").write_text("from legorl.sub.low import f as g\n")
    graph = import_graph(tmp_path, PACKAGE)
    assert graph["legorl.sub.low"] == {"legorl.sub.high"}  # the edge to its parent package is dropped
    assert cycles(graph) == [["legorl.sub.high", "legorl.sub.low"]]


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles among legorl modules (move the shared piece down a layer):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )
