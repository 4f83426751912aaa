"""The suites around serving and tooling (the gateway, front doors, validate, the
store, preprocessors, facts) in their ``--quick`` mode through the runner
(tests/benchmarks/smoke.py says what every quick run must write)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.suites import Variant
from tests.benchmarks.smoke import check_quick_run, needs_traces, parametrize


@needs_traces
@parametrize("serving")
def test_suite_quick(suite: str, variant: Variant, tmp_path: Path) -> None:
    check_quick_run(suite, variant, tmp_path)
