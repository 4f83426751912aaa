"""The percall suite's variants in their ``--quick`` mode through the runner, and a
baseline tree's child measuring with this tree's benchmark code (tests/benchmarks/smoke.py
says what every quick run must write)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suites import Variant
from tests.benchmarks.smoke import ROOT, check_quick_run, needs_traces, parametrize, runner


@needs_traces
@parametrize("percall")
def test_suite_quick(suite: str, variant: Variant, tmp_path: Path) -> None:
    check_quick_run(suite, variant, tmp_path)


@needs_traces
def test_a_baseline_tree_measures_its_ctxpolicy_with_this_trees_benchmark_code(
    tmp_path: Path,
) -> None:
    """A child timing a baseline imports that tree's ctxpolicy but this tree's benchmarks
    package, even when the baseline holds an older one (here: one without the helpers)."""
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "_common.py").write_text("RESULTS = None\n", encoding="utf-8")
    (tree / "ctxpolicy").symlink_to(ROOT / "ctxpolicy")
    out = tmp_path / "results"
    p = runner("run", "percall", "--variant", "calls", "--quick", "--results", str(out),
               "--baseline", str(tree))  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads((out / "bench_prepare_calls.json").read_text(encoding="utf-8"))
    assert data["baseline"] and data["this tree"]
