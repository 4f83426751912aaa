"""No adapter calls the engine inside an ``async def``: every engine call of an async
hook goes through ``ctxpolicy.calls.off_loop`` (or the driver's async form)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Session methods that run the engine (state commits, snapshots, summarizer calls)
ENGINE = {"prepare", "on_error", "record_usage", "add_tool_result", "recall_tool"}
MODULES = sorted((ROOT / "ctxpolicy" / "integrations").glob("*.py"))


def engine_calls_on_the_loop(source: str) -> list[str]:
    """``name:line`` of each direct engine call in the body of an ``async def``
    (nested plain functions are not on the loop: they are handed to a thread)."""
    found: list[str] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.in_async = False

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
            before, self.in_async = self.in_async, True
            self.generic_visit(node)
            self.in_async = before

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            before, self.in_async = self.in_async, False
            self.generic_visit(node)
            self.in_async = before

        def visit_Lambda(self, node: ast.Lambda) -> None:
            before, self.in_async = self.in_async, False
            self.generic_visit(node)
            self.in_async = before

        def visit_Call(self, node: ast.Call) -> None:
            fn = node.func
            if self.in_async and isinstance(fn, ast.Attribute) and fn.attr in ENGINE:
                found.append(f"{fn.attr}:{node.lineno}")
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_no_engine_call_inside_an_async_def(module: Path) -> None:
    assert engine_calls_on_the_loop(module.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_direct_call() -> None:
    src = "async def hook(s, m):\n    return s.prepare(m)\n"
    assert engine_calls_on_the_loop(src) == ["prepare:2"]
    ok = "async def hook(s, m):\n    return await off_loop(s.prepare, m)\n"
    assert engine_calls_on_the_loop(ok) == []
