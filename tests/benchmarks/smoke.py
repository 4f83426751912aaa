"""What the suite smoke tests share (tests/benchmarks/test_suites_*.py): every script's
quick run through the runner, results in a temporary directory, and what its output
must hold.

The suites are split by family over a few test files so that ``pytest -n auto --dist
loadfile`` (which sends a whole file to one worker) spreads them over the workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suites import SUITES, Variant
from tests.shared_data import SHARED, available

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

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

#: the suites smoked by each test file (tests/benchmarks/test_suites_<family>.py)
FAMILIES = {
    "percall": {"percall"},
    "quality": {"quality", "economics", "sweep", "incidents", "cache", "kinds", "taskstate",
                "tune", "simulate"},
    "serving": {"gateway", "frontdoor", "validate", "store", "preprocessors", "facts"},
}  # fmt: skip


def smoked(family: str | None = None) -> list[tuple[str, Variant]]:
    """One quick run per script (its first variant with a --quick mode), and per variant
    of :data:`OWN_MEASUREMENT`; ``family``: only that family's suites."""
    seen: set[str] = set()
    out = []
    for s in SUITES:
        for v in s.variants:
            if v.quick and v.default and (v.script not in seen or v.results in OWN_MEASUREMENT):
                seen.add(v.script)
                out.append((s.name, v))
    return [(s, v) for s, v in out if family is None or s in FAMILIES[family]]


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


def parametrize(family: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        ("suite", "variant"), smoked(family), ids=lambda x: getattr(x, "name", x)
    )


def check_quick_run(suite: str, variant: Variant, tmp_path: Path) -> None:
    """``run SUITE --variant V --quick --results tmp_path``: exit 0, its results JSON
    (with :data:`EXPECTED`'s keys) and section (a table or plots, a Reproduce line)
    written there and printed, benchmarks/results untouched."""
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
