"""Where the third-party data of ../shared lives, read in place (never copied).

Tests that need it skip with a clear reason when it is absent, but fail when the
``CI`` environment variable is set (CI always has ../shared beside the clone).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ``../shared`` beside the clone; ``CTXPOLICY_SHARED`` points elsewhere (the
#: benchmarks read the same variable, benchmarks/_common.py)
SHARED = Path(
    os.environ.get("CTXPOLICY_SHARED", Path(__file__).resolve().parents[1].parent / "shared")
)
TRACES = SHARED / "traces"
SEEDS = SHARED / "seeds"
SEED_CONFIGS = SHARED / "seed-configs"


def available(path: Path) -> bool:
    """Whether ``path`` exists; under ``CI`` a missing path is a failure, not a skip
    (for ``skipif``-style checks at collection time)."""
    if path.exists():
        return True
    if os.environ.get("CI"):
        pytest.fail(f"{path} not found (third-party data in ../shared); CI must provide it")
    return False


def _missing(what: Path) -> None:
    msg = f"{what} not found (third-party data in ../shared, not in the repo)"
    if os.environ.get("CI"):
        pytest.fail(msg + "; CI must provide it")
    pytest.skip(msg)


def require(path: Path) -> Path:
    """``path`` if it exists; else skip (or fail under CI)."""
    if not path.exists():
        _missing(path)
    return path


def shared_traces() -> list[Path]:
    """Every real trace in ../shared/traces (skip when there is none, fail on CI)."""
    files = sorted(TRACES.glob("*.jsonl")) if TRACES.is_dir() else []
    if not files:
        _missing(TRACES / "*.jsonl")
    return files
