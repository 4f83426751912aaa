"""The runner lists its suites, every script is a registered suite on the page and is
smoked by one of tests/benchmarks/test_suites_*.py (each script's tiny ``--quick`` mode
through the runner, so none can rot), and the page builds from results files alone.

Results go to a temporary directory (``python -m benchmarks run … --results DIR``), never
to benchmarks/results. Only exit codes and the shape of the output are asserted — no
wall-clock thresholds.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report import ORDER
from benchmarks.suites import SUITES
from tests.benchmarks.smoke import BENCH, EXPECTED, FAMILIES, runner, smoked
from tests.test_import_cycles import cycles, import_graph

SCRIPTS = sorted(p.stem for p in BENCH.glob("bench_*.py"))


def test_every_script_is_a_registered_suite_on_the_page() -> None:
    scripts = {v.script for s in SUITES for v in s.variants}
    assert set(SCRIPTS) == scripts
    assert {v.results for s in SUITES for v in s.variants} <= set(ORDER)
    assert set(EXPECTED) <= set(ORDER)


def test_every_smoked_suite_belongs_to_one_test_file() -> None:
    """Each suite with a quick run is smoked by exactly one test_suites_<family>.py."""
    names = [name for family in FAMILIES.values() for name in family]
    assert len(names) == len(set(names))
    assert {s for s, _ in smoked()} == set(names)
    assert sum(len(smoked(f)) for f in FAMILIES) == len(smoked())
    here = Path(__file__).parent
    assert {p.stem.removeprefix("test_suites_") for p in here.glob("test_suites_*.py")} == set(
        FAMILIES
    )


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
