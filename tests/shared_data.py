"""Where the third-party data of ../shared lives, read in place (never copied).

Tests that need it skip with a clear reason when it is absent, but fail when the
``CI`` environment variable is set (CI always has ../shared beside the clone).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
SEEDS = SHARED / "seeds"


def require(path: Path) -> Path:
    """``path`` if it exists; else skip (or fail under CI)."""
    if path.exists():
        return path
    msg = f"{path} not found (third-party data in ../shared, not in the repo)"
    if os.environ.get("CI"):
        pytest.fail(msg + "; CI must provide it")
    pytest.skip(msg)


def shared_traces() -> list[Path]:
    """Every real trace in ../shared/traces (skip when absent, fail on CI)."""
    return sorted(require(TRACES).glob("*.jsonl"))
