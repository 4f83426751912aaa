"""The orchestration of replays (``ctxpolicy.sim.run``) and the layering of ``sim/``."""

from __future__ import annotations

from pathlib import Path

from ctxpolicy.resolve.load import load_policy
from ctxpolicy.sim.run import RunSpec, simulate
from ctxpolicy.sim.synth import coding_session, data_session, write_jsonl
from tests.test_import_cycles import import_graph

ROOT = Path(__file__).resolve().parents[2]


def test_the_loop_never_reaches_up_to_the_orchestration() -> None:
    """``sim/`` has no import cycle (``tests/test_import_cycles.py`` checks the whole
    package); this checks its direction: the replay loop and what it uses never import
    ``sim.run``."""
    graph = import_graph()
    for low in ("replay", "baselines", "parallel", "metrics"):
        assert "ctxpolicy.sim.run" not in graph[f"ctxpolicy.sim.{low}"], low


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
