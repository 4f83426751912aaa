"""Per-call timing of ctxpolicy vs LangChain (benchmarks/peers/timing.py) on a real trace.

Only shapes and identities are asserted — no wall-clock thresholds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks._inputs import load_agent
from benchmarks.peers.catalog import available_peers
from benchmarks.peers.timing import per_call, profile_calls
from ctxpolicy.sim.importers import load_trace
from tests.shared_data import TRACES, require

TRACE = "swe-agent__demo.ctf.crypto.katy.jsonl"


@pytest.fixture(scope="module")
def setup() -> tuple[Any, list[dict[str, Any]]]:
    policy, _ = load_agent("coding_agent_16k")
    return policy, load_trace(require(TRACES / TRACE))


@pytest.fixture(scope="module")
def two_trees() -> Iterator[dict[str, Any]]:
    """This tree's worker and a baseline worker of the same tree (started once: the
    two tests of a baseline tree share them)."""
    from benchmarks.peers.worker import ROOT, Worker

    workers = {"": Worker(ROOT), "baseline": Worker(ROOT)}
    try:
        yield workers
    finally:
        for w in workers.values():
            w.close()


def test_per_call_measures_every_model_call(setup: tuple[Any, list[dict[str, Any]]]) -> None:
    policy, msgs = setup
    r = per_call(TRACE, msgs, policy, repeat=2)
    calls = sum(1 for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0)
    assert r["calls"] == calls
    assert r["repeat"] == 2
    assert r["counter"] == "quicktok:qwen3"  # the exact counter of the shipped Qwen model
    assert r["floor_per_call_ms"] == pytest.approx(r["one_pass_ms"] / calls)
    v = r["variants"]
    assert set(v) == {
        "prepare",
        "add_tool_result",
        "ctxpolicy",
        "langchain",
        *available_peers(("deepagents", "langmem"))[0],
    }
    assert r["peers"] == ["langchain", *available_peers(("deepagents", "langmem"))[0]]
    for name, x in v.items():
        assert x["median_ms"] > 0, name
        assert x["median_over_floor_per_call"] == pytest.approx(
            x["median_ms"] / r["floor_per_call_ms"]
        )
        assert x["total_over_one_pass"] == pytest.approx(x["total_ms"] / r["one_pass_ms"])
    assert r["ctxpolicy_over_langchain"] == pytest.approx(
        v["ctxpolicy"]["median_ms"] / v["langchain"]["median_ms"]
    )
    assert r["goal_le_langchain"] == (v["ctxpolicy"]["median_ms"] <= v["langchain"]["median_ms"])


def test_profile_covers_both_entry_points(setup: tuple[Any, list[dict[str, Any]]]) -> None:
    policy, msgs = setup
    p = profile_calls(policy, [(TRACE, msgs)], top=50)
    names = [r["function"] for r in p["top_cumulative_ctxpolicy"]]
    assert any(n.endswith("(prepare)") for n in names)
    assert any(n.endswith("(add_tool_result)") for n in names)
    assert 0.99 <= sum(m["share"] for m in p["modules"]) <= 1.0 + 1e-9 or len(p["modules"]) == 50
    assert all(0 <= r["own_share"] <= 1 for r in p["top_own"])


def test_bench_engine_per_call_only(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--per-call-only`` writes the per-call section alone (and its goal)."""
    import json

    require(TRACES)  # the benchmark replays the largest shared trace

    import benchmarks._common as common
    from benchmarks import bench_engine

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    assert bench_engine.main(["--quick", "--per-call-only"]) == 0
    data = json.loads((tmp_path / "bench_engine.json").read_text(encoding="utf-8"))
    assert data["conversations"] == [] and data["memory"] is None
    assert len(data["per_call"]["traces"]) == 1
    assert data["goals"]["per_call_le_langchain"] in (True, False)
    md = (tmp_path / "bench_engine.md").read_text(encoding="utf-8")
    assert "### Per model call: ctxpolicy vs LangChain" in md
    assert "bench_engine.py --quick --per-call-only`" in md


def test_per_call_against_a_baseline_tree(
    setup: tuple[Any, list[dict[str, Any]]], two_trees: dict[str, Any]
) -> None:
    """``--baseline``: both trees replay in worker processes, in turn; this tree
    against itself as the baseline gives the same calls and both sets of variants."""
    policy, msgs = setup
    r = per_call(
        TRACE,
        msgs,
        policy,
        repeat=2,
        workers=two_trees,
        request={"trace": str(TRACES / TRACE), "agent": "coding_agent_16k"},
    )
    v = r["variants"]
    assert set(v) == {
        "prepare",
        "add_tool_result",
        "ctxpolicy",
        "langchain",
        "baseline_prepare",
        "baseline_add_tool_result",
        "baseline_ctxpolicy",
        *available_peers(("deepagents", "langmem"))[0],
    }
    assert r["calls"] == sum(1 for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0)
    assert r["over_baseline"]["ctxpolicy"] == pytest.approx(
        v["ctxpolicy"]["median_ms"] / v["baseline_ctxpolicy"]["median_ms"]
    )
    assert r["baseline_over_langchain"] == pytest.approx(
        v["baseline_ctxpolicy"]["median_ms"] / v["langchain"]["median_ms"]
    )


def test_check_identical_finds_a_changed_output(tmp_path: Any) -> None:
    """benchmarks/check_identical.py: this tree against itself agrees; against a copy
    that renders tool results one character differently it reports the difference."""
    import shutil

    from benchmarks import check_identical
    from benchmarks._common import ROOT

    require(TRACES)
    args = ["--traces", "1"]
    assert check_identical.main(["--baseline", str(ROOT), *args]) == 0
    changed = tmp_path / "src"
    shutil.copytree(ROOT / "ctxpolicy", changed / "ctxpolicy")
    module = changed / "ctxpolicy" / "engine" / "tool_results.py"
    text = module.read_text(encoding="utf-8")
    rendered = "        if isinstance(output, str):\n            return output, info"
    assert rendered in text
    module.write_text(text.replace(rendered, rendered.replace("output,", '"~" + output,')))
    assert check_identical.main(["--baseline", str(changed), *args]) == 1


def test_parts_are_booked_per_call_and_the_clocks_removed(
    setup: tuple[Any, list[dict[str, Any]]],
) -> None:
    from benchmarks.peers.parts import parts_markdown, per_call_parts
    from ctxpolicy.engine.session import Session
    from ctxpolicy.snapshots import LocalStore

    policy, msgs = setup
    prepare, write = Session.prepare, LocalStore.write
    r = per_call_parts(policy, msgs, repeat=1)
    assert Session.prepare is prepare and LocalStore.write is write  # clocks taken off
    parts = r["parts"]
    assert parts["prepare (whole)"]["per_call"] == 1.0
    results = sum(1 for m in msgs if m["role"] == "tool")
    assert r["tool_results"] == results
    assert parts["add_tool_result (whole)"]["per_call"] == pytest.approx(results / r["calls"])
    assert parts["snapshot"]["per_call"] == parts["preprocess"]["per_call"]
    # one save per prepare and per add_tool_result: encoding + commit, paired
    assert parts["state save"]["per_call"] == pytest.approx(1 + results / r["calls"])
    assert set(r["floors_us"]) == {"atomic file publish", "file creation", "exact count"}
    assert all(v > 0 for v in r["floors_us"].values())
    assert "floor: atomic file publish" in "\n".join(parts_markdown(TRACE, r))


def test_parts_of_two_trees_side_by_side(two_trees: dict[str, Any]) -> None:
    from benchmarks.peers.parts import parts_markdown
    from benchmarks.peers.timing import _parts_of_both

    request = {"trace": str(require(TRACES / TRACE)), "agent": "coding_agent_16k"}
    r = _parts_of_both(two_trees, request, turns=2)
    assert r["parts"].keys() == r["baseline"]["parts"].keys()
    assert r["parts"]["prepare (whole)"]["per_call"] == 1.0
    assert r["calls"] == r["baseline"]["calls"] > 0
    md = "\n".join(parts_markdown(TRACE, r, 0.1, r["baseline"]))
    assert "baseline → this tree" in md and "×)" in md
