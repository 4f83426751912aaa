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


#: the trace files of each kind of agent, by name prefix (../shared/traces/SOURCES.md)
KINDS: dict[str, tuple[str, ...]] = {
    "swe": ("swe-agent__", "mini-swe-agent__", "openhands__"),
    "customer_service": ("tau-bench__", "tau2-bench__"),
    "multi_tool": ("tapeagents-gaia__", "tapeagents-workarena__"),
    "data_analysis": ("spider2__",),
}
#: each shipped per-kind policy, with the kinds of agents it is for
AGENT_KINDS: dict[str, tuple[str, ...]] = {
    "default": ("multi_tool", "data_analysis"),
    "coding_agent": ("swe",),
    "code_review_agent": ("swe",),
    "customer_service_agent": ("customer_service",),
    "data_analysis_agent": ("data_analysis", "multi_tool"),
    "support_agent": ("customer_service",),
}


def kind_traces(agent: str) -> list[Path]:
    """The shared traces of the kinds of agents ``agent``'s shipped policy is for."""
    prefixes = tuple(p for k in AGENT_KINDS[agent] for p in KINDS[k])
    return [p for p in sorted(TRACES.glob("*.jsonl")) if p.name.startswith(prefixes)]
