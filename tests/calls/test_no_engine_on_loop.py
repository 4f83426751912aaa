"""No front end calls the engine inside an ``async def``: every engine call of the
gateway and of an async adapter hook goes through ``ctxpolicy.calls.off_loop`` (or the
driver's async form), the one place that hands it to a worker thread; from there a
session of a pool with engine processes sends the step to its process
(``ctxpolicy.calls.processes``), and no front end starts a process of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Session methods that run the engine (state commits, snapshots, summarizer calls)
ENGINE = {"prepare", "on_error", "record_usage", "add_tool_result", "recall_tool", "run_on"}
#: The async front ends: the gateway's HTTP host and the framework adapters
FRONT_ENDS = ("gateway", "integrations")
MODULES = sorted(p for pkg in FRONT_ENDS for p in (ROOT / "ctxpolicy" / pkg).glob("*.py"))
#: Ways to a worker thread other than ``off_loop`` (each would be a second place)
THREAD_HOPS = {"to_thread", "run_sync", "run_in_executor"}
#: Ways to another process (the engine's processes are ``ctxpolicy.calls.processes``)
PROCESS_HOPS = {"Popen", "Process", "ProcessPoolExecutor", "create_subprocess_exec", "fork"}


class _AsyncBodies(ast.NodeVisitor):
    """Calls made directly in the body of an ``async def`` (nested plain functions and
    lambdas are not on the loop: they are handed to a thread)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.in_async = False
        self.found: list[str] = []

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
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        if self.in_async and name in self.names:
            self.found.append(f"{name}:{node.lineno}")
        self.generic_visit(node)


def engine_calls_on_the_loop(source: str) -> list[str]:
    """``name:line`` of each direct engine call in the body of an ``async def``."""
    v = _AsyncBodies(ENGINE)
    v.visit(ast.parse(source))
    return v.found


def thread_hops(source: str, hops: frozenset[str] | set[str] = THREAD_HOPS) -> list[str]:
    """``name:line`` of each call of a thread helper other than ``off_loop`` (or of
    another of ``hops``), anywhere in the module."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name in hops:
                found.append(f"{name}:{node.lineno}")
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_engine_call_inside_an_async_def(module: Path) -> None:
    assert engine_calls_on_the_loop(module.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_off_loop_is_the_only_way_to_a_worker_thread(module: Path) -> None:
    assert thread_hops(module.read_text(encoding="utf-8")) == []


def test_the_front_ends_are_all_checked() -> None:
    names = {f"{p.parent.name}/{p.name}" for p in MODULES}
    assert {"gateway/calls.py", "gateway/app.py", "integrations/litellm.py"} <= names


def test_the_check_sees_a_direct_call() -> None:
    src = "async def hook(s, m):\n    return s.prepare(m)\n"
    assert engine_calls_on_the_loop(src) == ["prepare:2"]
    ok = "async def hook(s, m):\n    return await off_loop(s.prepare, m)\n"
    assert engine_calls_on_the_loop(ok) == []
    nested = "async def hook(s, m):\n    def work():\n        return s.prepare(m)\n"
    assert engine_calls_on_the_loop(nested) == []


def test_the_check_sees_a_second_way_to_a_thread() -> None:
    src = "import anyio.to_thread\nasync def f(g):\n    await anyio.to_thread.run_sync(g)\n"
    assert thread_hops(src) == ["run_sync:3"]
    assert thread_hops("async def f(g):\n    await off_loop(g)\n") == []


@pytest.mark.parametrize("module", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_front_end_starts_a_process_of_its_own(module: Path) -> None:
    assert thread_hops(module.read_text(encoding="utf-8"), PROCESS_HOPS) == []


def test_the_check_sees_a_function_run_where_the_session_lives() -> None:
    src = "async def hook(s, m):\n    return run_on(s, prepare_sync, m)\n"
    assert engine_calls_on_the_loop(src) == ["run_on:2"]
    ok = "async def hook(s, m):\n    return await off_loop(run_on, s, prepare_sync, m)\n"
    assert engine_calls_on_the_loop(ok) == []
    assert thread_hops("import subprocess\nsubprocess.Popen(['x'])\n", PROCESS_HOPS) == ["Popen:2"]
