"""The orchestration of replays (``ctxpolicy.sim.run``) and the layering of ``sim/``."""

from __future__ import annotations

import ast
from pathlib import Path

from ctxpolicy.resolve.load import load_policy
from ctxpolicy.sim.run import RunSpec, simulate
from ctxpolicy.sim.synth import coding_session, data_session, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "ctxpolicy" / "sim"


def _imports(path: Path) -> set[str]:
    """Every ``ctxpolicy.sim.*`` module ``path`` imports, at any depth (also in functions)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for n in names:
            parts = n.split(".")
            if (
                parts[:2] == ["ctxpolicy", "sim"]
                and len(parts) > 2
                and (SIM / f"{parts[2]}.py").exists()
            ):
                out.add(parts[2])
    out.discard(path.stem)
    return out


def test_sim_modules_have_no_import_cycle() -> None:
    graph = {p.stem: _imports(p) for p in SIM.glob("*.py") if p.stem != "__init__"}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            assert state.get(m) != 1, f"import cycle: {' -> '.join([*stack, n, m])}"
            if m not in state:
                visit(m, [*stack, n])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    # the loop never reaches up to the orchestration
    assert "run" not in graph["replay"] | graph["baselines"] | graph["parallel"] | graph["metrics"]


def test_simulate_runs_policies_and_baselines_in_parallel_identically(tmp_path: Path) -> None:
    paths = []
    for i, msgs in enumerate((coding_session(steps=12), data_session(steps=10)), start=1):
        p = tmp_path / f"t{i}.jsonl"
        write_jsonl(p, msgs)
        paths.append(str(p))
    policy = load_policy(str(ROOT / "policies" / "agents.yaml"), agent="coding_agent")
    runs = [RunSpec(label="coding_agent", policy=policy)]
    seq = simulate(paths, runs, baselines=["none"], window=16384, jobs=1)
    par = simulate(paths, runs, baselines=["none"], window=16384, jobs=2)
    assert seq == par
    assert [t["trace"] for t in seq["traces"]] == ["t1.jsonl", "t2.jsonl"]
    assert [r["run"] for r in seq["traces"][0]["runs"]] == ["coding_agent", "none"]
    assert seq["check"]["passed"] is (not seq["check"]["problems"])
