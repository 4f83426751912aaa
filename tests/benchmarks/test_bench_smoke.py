"""Every benchmark suite runs in its tiny ``--quick`` mode through the runner, so none can
rot; the runner lists its suites; the page builds from results files alone.

Results go to a temporary directory (``python -m benchmarks run … --results DIR``), never
to benchmarks/results. Only exit codes and the shape of the output are asserted — no
wall-clock thresholds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import ORDER
from benchmarks.suites import SUITES, Variant
from tests.shared_data import SHARED, available
from tests.test_import_cycles import cycles, import_graph

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCH.glob("bench_*.py"))

#: top-level keys each results JSON must have (results not listed: just valid JSON)
EXPECTED = {
    "bench_engine": {"machine", "conversations", "memory", "goals"},
    "bench_quality": {"machine", "results", "goals", "windows", "agents"},
    "bench_validate": {"machine", "cold", "warm", "ctxpolicy_over_check_jsonschema_cold"},
    "bench_incidents": {"machine", "scenarios", "window"},
    "bench_cache": {"machine", "results", "windows"},
    "bench_state": {"machine", "total_s", "commit_s", "prepare_per_call_s", "saves"},
    "bench_floors": {"machine", "traces", "repeat"},
    "bench_otel": {"machine", "paired_over_a", "events", "spans"},
    "bench_dashboard": {"machine", "fold_ms_per_prepare", "poll_ms", "within_goal"},
    "bench_call_profile": {"machine", "steps", "this tree"},
    "bench_scaling": {"machine", "sizes", "runs", "timeout"},
    "bench_prepare_calls": {"machine", "repeat", "this tree"},
    "bench_simulate": {"plots"},
    "bench_preprocessors": {"rows", "tool_results"},
}


#: variants whose script also serves another variant, with a measurement of its own
#: (a flag selects it): smoked too, not only the script's first variant
OWN_MEASUREMENT = {"bench_call_profile", "bench_state", "bench_dashboard"}


def _smoked() -> list[tuple[str, Variant]]:
    """One quick run per script (its first variant with a --quick mode), and per variant
    of :data:`OWN_MEASUREMENT`."""
    seen: set[str] = set()
    out = []
    for s in SUITES:
        for v in s.variants:
            if v.quick and v.default and (v.script not in seen or v.results in OWN_MEASUREMENT):
                seen.add(v.script)
                out.append((s.name, v))
    return out


def runner(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


needs_traces = pytest.mark.skipif(
    not available(SHARED / "traces"), reason="shared traces not available"
)


def test_every_script_is_a_registered_suite_on_the_page() -> None:
    scripts = {v.script for s in SUITES for v in s.variants}
    assert set(SCRIPTS) == scripts
    assert {v.results for s in SUITES for v in s.variants} <= set(ORDER)
    assert set(EXPECTED) <= set(ORDER)


def test_list_names_every_suite() -> None:
    p = runner("list", timeout=60)
    assert p.returncode == 0, p.stderr
    for s in SUITES:
        assert s.name in p.stdout
    assert runner("run", "no-such-suite", timeout=60).returncode == 2


def test_no_import_cycles_inside_benchmarks() -> None:
    """Imports between benchmarks' modules (at the top, in functions, under
    TYPE_CHECKING) form no cycle."""
    graph = import_graph(BENCH)
    assert "benchmarks._common" in graph
    assert not cycles(graph), cycles(graph)


@needs_traces
@pytest.mark.parametrize(("suite", "variant"), _smoked(), ids=lambda x: getattr(x, "name", x))
def test_suite_quick(suite: str, variant: Variant, tmp_path: Path) -> None:
    name = variant.results
    real = BENCH / "results" / f"{name}.json"
    before = real.stat().st_mtime_ns if real.exists() else None
    p = runner("run", suite, "--variant", variant.name, "--quick", "--results", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    j, m = tmp_path / f"{name}.json", tmp_path / f"{name}.md"
    assert j.exists() and m.exists(), sorted(x.name for x in tmp_path.iterdir())
    data = json.loads(j.read_text(encoding="utf-8"))
    assert EXPECTED.get(name, set()) <= set(data)
    text = m.read_text(encoding="utf-8")
    assert text.startswith("## ")
    assert "Reproduce" in text
    assert "| --- |" in text or "![" in text  # a table, or the plots
    assert p.stdout.strip()  # the section is printed too
    assert (real.stat().st_mtime_ns if real.exists() else None) == before  # real results untouched


def test_render_assembles_the_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "bench_x.md").write_text(
        "## X section\n\n| a | b |\n| --- | ---: |\n| 1 | 2 |\n", encoding="utf-8"
    )
    (results / "bench_x.json").write_text(json.dumps({"quick": True}), encoding="utf-8")
    (results / "bench_otel.md").write_text(
        "## O\n\nReproduce: `.venv/bin/python benchmarks/bench_otel.py --rounds 3`\n",
        encoding="utf-8",
    )
    (results / "bench_peers_ruler.md").write_text(
        "## P\n\nReproduce: `python benchmarks/bench_quality.py --peers-only --peer-policies "
        "agents.yaml:coding_agent,agents.yaml:coding_agent_16k --results-name "
        "bench_peers_ruler --jobs 2`\n",
        encoding="utf-8",
    )
    out = tmp_path / "docs" / "benchmarks.md"
    p = runner(
        "render",
        "--results",
        str(results),
        "--out",
        str(out),
        "--img",
        str(tmp_path / "docs" / "img"),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# Benchmarks")
    assert "make bench" in page and "make docs" in page
    assert "## X section" in page
    assert "Quick run" in page  # quick results are flagged
    assert "Reproduce: `.venv/bin/python benchmarks/bench_x.py`" in page  # not a suite
    assert "`.venv/bin/python -m benchmarks run percall --variant otel --rounds 3`" in page
    assert "`python -m benchmarks run quality --variant peers --jobs 2`" in page
    assert page.index("## O") < page.index("## X section")  # registered order, then the rest


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
