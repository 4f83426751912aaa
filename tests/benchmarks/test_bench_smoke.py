"""Every benchmark script runs in its tiny ``--quick`` mode, so none can rot.

Results go to a temporary directory (``benchmarks._common.RESULTS`` is redirected), never
to benchmarks/results. Only exit codes and the shape of the output are asserted — no
wall-clock thresholds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_data import SHARED, available

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("bench_*.py"))

#: top-level keys each results JSON must have (scripts not listed: just valid JSON)
EXPECTED = {
    "bench_engine.py": {"machine", "conversations", "memory", "goals"},
    "bench_quality.py": {"machine", "results", "goals", "windows", "agents"},
    "bench_validate.py": {"machine", "cold", "warm", "ctxpolicy_over_check_jsonschema_cold"},
    "bench_incidents.py": {"machine", "scenarios", "window"},
    "bench_cache.py": {"machine", "results", "windows"},
    "bench_state.py": {"machine", "total_s", "commit_s", "prepare_per_call_s", "saves"},
    "bench_scaling.py": {"machine", "sizes", "runs", "timeout"},
    "bench_prepare_calls.py": {"machine", "repeat", "this tree"},
}

RUNNER = """
import runpy, sys
from pathlib import Path
sys.path.insert(0, {root!r})
import benchmarks._common as common
common.RESULTS = Path({out!r})
sys.argv = [{script!r}, "--quick"]
runpy.run_path({script!r}, run_name="__main__")
"""


def run_quick(script: Path, out: Path) -> subprocess.CompletedProcess[str]:
    code = RUNNER.format(root=str(ROOT), out=str(out), script=str(script))
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


needs_traces = pytest.mark.skipif(
    not available(SHARED / "traces"), reason="shared traces not available"
)


def test_every_bench_script_is_covered() -> None:
    assert set(EXPECTED) <= set(SCRIPTS)


@needs_traces
@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_quick(name: str, tmp_path: Path) -> None:
    script = BENCH / name
    if "--quick" not in script.read_text(encoding="utf-8"):
        pytest.skip(f"{name} has no --quick mode")
    stem = script.stem
    real = BENCH / "results" / f"{stem}.json"
    before = real.stat().st_mtime_ns if real.exists() else None
    p = run_quick(script, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    j, m = tmp_path / f"{stem}.json", tmp_path / f"{stem}.md"
    assert j.exists() and m.exists(), sorted(x.name for x in tmp_path.iterdir())
    data = json.loads(j.read_text(encoding="utf-8"))
    assert EXPECTED.get(name, set()) <= set(data)
    text = m.read_text(encoding="utf-8")
    assert text.startswith("## ")
    assert "Reproduce" in text
    assert "| --- |" in text  # at least one table
    assert p.stdout.strip()  # the table is printed too
    assert (real.stat().st_mtime_ns if real.exists() else None) == before  # real results untouched


def test_report_assembles_the_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "bench_x.md").write_text(
        "## X section\n\n| a | b |\n| --- | ---: |\n| 1 | 2 |\n", encoding="utf-8"
    )
    (results / "bench_x.json").write_text(json.dumps({"quick": True}), encoding="utf-8")
    out = tmp_path / "docs" / "benchmarks.md"
    p = subprocess.run(
        [
            sys.executable,
            str(BENCH / "report.py"),
            "--results",
            str(results),
            "--out",
            str(out),
            "--img",
            str(tmp_path / "docs" / "img"),
            "--no-simulate",
            "--no-preprocessors",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    page = out.read_text(encoding="utf-8")
    assert page.startswith("# Benchmarks")
    assert "make bench" in page
    assert "## X section" in page
    assert "Quick run" in page  # quick results are flagged
    assert "Reproduce: `.venv/bin/python benchmarks/bench_x.py`" in page


@needs_traces
def test_bench_tune_before_after_on_the_same_tree(tmp_path: Path) -> None:
    """``bench_tune.py --baseline``: both studies run (here: this tree twice) and their
    outputs compare identical; the section and its table are written."""
    code = RUNNER.format(root=str(ROOT), out=str(tmp_path), script=str(BENCH / "bench_tune.py"))
    code = code.replace('"--quick"]', f'"--quick", "--trials", "2", "--baseline", {str(ROOT)!r}]')
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads((tmp_path / "bench_tune_speed.json").read_text(encoding="utf-8"))
    (d,) = data["windows"].values()
    assert d["identical"] and d["first_difference"] is None and d["trials"] == 2
    assert d["replays"]["baseline"] == d["replays"]["this tree"] > 0
    text = (tmp_path / "bench_tune_speed.md").read_text(encoding="utf-8")
    assert "| --- |" in text and "Reproduce" in text and "identical ✓" in text
