"""No import cycles between the modules of ``ctxpolicy/`` (every package: the engine,
the front door, the plugins, the apps), every import counted.

import-linter (``make lint``) checks the layering of packages but leaves out the
imports under ``if TYPE_CHECKING:`` (``.importlinter``: ``exclude_type_checking_imports``).
This test reads every module's source instead and counts every import of a
``ctxpolicy`` module: at the top, inside a function, and under ``TYPE_CHECKING``, so
an annotation that closes a loop (module A takes B's type, B imports A) is a cycle
here. An edge goes to the most specific module named (``from a.b import c`` is an
edge to ``a.b.c`` when that is a module, else to the package ``a.b``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctxpolicy"


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) of every module under ``package``."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` (a folder under the repository's root,
    ``ctxpolicy/`` unless told) it imports anywhere in its source."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package up
                    base = name.split(".") if package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:
                        edges.add(sub)
                    elif target in modules:
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def _path(graph: dict[str, set[str]], component: frozenset[str]) -> str:
    """One loop through ``component``, for the failure message."""
    start = min(component)
    seen = [start]
    node = start
    while True:
        node = min(m for m in graph[node] if m in component)
        if node in seen:
            return " -> ".join([*seen[seen.index(node) :], node])
        seen.append(node)


def test_the_graph_sees_type_checking_and_function_imports() -> None:
    graph = import_graph()
    assert "ctxpolicy.gateway.calls" in graph and "ctxpolicy.calls.driver" in graph
    # under TYPE_CHECKING only (an annotation)
    assert "ctxpolicy.engine.context" in graph["ctxpolicy.engine.pipeline"]
    # inside a function only
    assert "ctxpolicy.snapshots.recall" in graph["ctxpolicy.engine.session"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset({"a", "b", "c"})]


def test_no_import_cycles_in_the_package() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (TYPE_CHECKING and function imports counted):\n" + (
        "\n".join(_path(graph, c) for c in found)
    )


def test_the_engine_context_is_a_leaf() -> None:
    """``EngineContext`` holds fields only: nothing it imports takes a context back."""
    graph = import_graph()
    below: set[str] = set()
    todo = [*graph["ctxpolicy.engine.context"]]
    while todo:
        m = todo.pop()
        if m not in below:
            below.add(m)
            todo.extend(graph[m])
    assert "ctxpolicy.engine.context" not in below
