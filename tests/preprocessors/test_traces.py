"""Replay ../shared/traces through the coding_agent-like rules (benchmarks/bench_preprocessors.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.shared_data import TRACES, shared_traces

ROOT = Path(__file__).resolve().parents[2]


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "bench_preprocessors", ROOT / "benchmarks" / "bench_preprocessors.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_replay_traces() -> None:
    shared_traces()  # skip when absent, fail on CI
    bench = _bench()
    res = bench.run(TRACES)
    assert res["tool_results"] == sum(r["results"] for r in res["rows"].values()) > 0
    assert res["preprocess_failed"] == 0
    for name, r in res["rows"].items():
        assert r["tokens_after"] <= r["tokens_before"], name
    assert "| **all** |" in bench.table(res)
