"""No import cycle inside the front door's packages (``wire``, ``calls``, ``gateway``,
``integrations``), imports under ``TYPE_CHECKING`` included: import-linter does not see
those, and a cycle of annotations is still two modules that cannot be read apart."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "calls", "gateway", "integrations")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Modules imported at module level or in an ``if TYPE_CHECKING:`` block (imports
    inside functions run late and are left out)."""
    found: set[str] = set()
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If):
            body += node.body
        body.append(node)
    base = module if is_package else module.rsplit(".", 1)[0]
    for node in body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                name = f"{anchor}.{node.module}" if node.module else anchor
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
    return found


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / "ctxpolicy" / pkg).rglob("*.py")]
    modules = {_module(p): p for p in files}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _top_level_imports(tree, name, path.name == "__init__.py")
        # a package's __init__ re-exporting its modules is not a cycle of theirs
        out[name] = {m for m in imported if m in modules and not name.startswith(m + ".")}
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_in_the_front_door_packages() -> None:
    edges = graph()
    assert "ctxpolicy.gateway.calls" in edges and "ctxpolicy.calls.driver" in edges
    assert cycles(edges) == []


def test_the_check_sees_a_type_checking_cycle() -> None:
    a = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import X\n")
    assert "p.b" in _top_level_imports(a, "p.a", False)
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.a"}}) == [["p.a", "p.b"]]
