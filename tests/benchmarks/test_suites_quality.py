"""The suites replaying the shared traces (quality, economics, the sweep, incidents,
cache, kinds, task state, tune, simulate) in their ``--quick`` mode through the runner,
and tune's before/after on the same tree (tests/benchmarks/smoke.py says what every
quick run must write)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suites import Variant
from tests.benchmarks.smoke import ROOT, check_quick_run, needs_traces, parametrize, runner


@needs_traces
@parametrize("quality")
def test_suite_quick(suite: str, variant: Variant, tmp_path: Path) -> None:
    check_quick_run(suite, variant, tmp_path)


@needs_traces
def test_bench_tune_before_after_on_the_same_tree(tmp_path: Path) -> None:
    """``tune --variant speed --baseline``: both studies run (here: this tree twice) and
    their outputs compare identical; the section and its table are written."""
    p = runner(
        "run",
        "tune",
        "--variant",
        "speed",
        "--quick",
        "--results",
        str(tmp_path),
        "--trials",
        "2",
        "--baseline",
        str(ROOT),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads((tmp_path / "bench_tune_speed.json").read_text(encoding="utf-8"))
    (d,) = data["windows"].values()
    assert d["identical"] and d["first_difference"] is None and d["trials"] == 2
    assert d["replays"]["baseline"] == d["replays"]["this tree"] > 0
    text = (tmp_path / "bench_tune_speed.md").read_text(encoding="utf-8")
    assert "| --- |" in text and "Reproduce" in text and "identical ✓" in text
