"""No import circles in ``kit/`` (issue 30, part 8): the module import graph, built from the source with
:mod:`ast`, has no cycle. Top-level and function-level imports both count (a lazy import is still a
dependency); imports under ``if TYPE_CHECKING:`` do not (they never run). A module importing its own package
(``kit.recipes.sections`` -> ``kit.recipes``) counts too: the package must not import it back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parent.parent / "kit"


def _module_name(path: Path, root: Path) -> tuple[str, str]:
    """``(module, package)`` of a file under ``root``'s parent: ``kit/a/__init__.py`` -> ``("kit.a", "kit.a")``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``tree`` imports (``from a import b``: ``a.b`` when it is a module, else
    ``a``; relative imports resolved against ``package``), outside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skipped.update(id(n) for b in node.body for n in ast.walk(b))
    out: set[str] = set()

    def nearest(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(m for a in node.names if (m := nearest(a.name)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                full = f"{mod}.{a.name}"
                hit = full if full in modules else nearest(mod)
                if hit:
                    out.add(hit)
    return out


def import_graph(root: Path = KIT) -> dict[str, set[str]]:
    """Module -> the kit modules it imports (itself excluded), for every ``*.py`` under ``root``."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = {m for m, _ in files}
    graph = {}
    for (mod, package), path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[mod] = _imports(tree, package, modules) - {mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each as a
    cycle through them: ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        scc.append(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        found.append(_cycle(sorted(scc), graph))
    return found


def _cycle(scc: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module (breadth-first back to it), for the message."""
    members, first = set(scc), scc[0]
    prev: dict[str, str] = {}
    queue = [first]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == first:
                path = [v]
                while path[-1] != first:
                    path.append(prev[path[-1]])
                return [*reversed(path), first]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [*scc, first]


def test_kit_has_no_import_circle():
    found = circles(import_graph())
    assert not found, "import circle(s) in kit/:\n" + "\n".join("  " + " -> ".join(c) for c in found)


def test_the_check_finds_a_circle_and_names_it(tmp_path):
    pkg = tmp_path / "kit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from kit.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")  # a function-level, relative import
    (pkg / "c.py").write_text("import kit.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kit import a\n")
    (pkg / "e.py").write_text("from kit import d\n")
    graph = import_graph(pkg)
    assert graph["kit.sub.b"] == {"kit.c"} and graph["kit.d"] == set() and graph["kit.e"] == {"kit.d"}
    found = circles(graph)
    assert found == [["kit.a", "kit.sub.b", "kit.c", "kit.a"]]


@pytest.mark.parametrize("edge", ["kit.cli_sequence -> kit.cli", "kit.recipes -> kit.rl.staging",
                                  "kit.view.verdict -> kit.view.load", "kit.web.zim.resolve -> kit.web.zim.backend",
                                  "kit.cli_params -> kit.data.synthesis_web -> kit.cli_params"])
def test_the_circles_issue_30_named_are_gone(edge):
    graph = import_graph()
    hops = edge.split(" -> ")
    assert not all(b in graph[a] for a, b in zip(hops, hops[1:], strict=False)), edge
