"""A clone without ../shared: the tests that need it skip with a reason, and fail
when ``CI`` is set (tests/shared_data.py is the one place that decides)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: one test of each kind that reads ../shared (seed configs, traces, benchmarks)
SELECTION = [
    "tests/policy/test_compat.py::test_copies_are_unchanged",
    "tests/benchmarks/peers/test_timing.py::test_bench_engine_per_call_only",
    "tests/preprocessors/test_traces.py",
]


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["CTXPOLICY_SHARED"] = str(tmp_path / "no-shared-here")
    if ci:
        env["CI"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *SELECTION],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_without_shared_the_tests_skip_with_a_reason(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, ci=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "failed" not in out and "error" not in out.lower().replace("errors=", "")
    assert "not found (third-party data in ../shared" in out


@pytest.mark.slow
def test_without_shared_ci_fails(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, ci=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "CI must provide it" in out
